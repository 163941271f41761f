"""What a route is to the gate: a typed ``Syscall`` (its name, who may call it, what its
request may carry), attached by the route decorators below, and the body type, read from
the handler's own ``data`` parameter (declared once, where the handler takes it).

The gate (api/http/gate.py) decodes the body once into that type; ``GateDecoded``, the
handlers' data DTO, hands the gate's struct to the handler instead of Litestar decoding
the bytes again. The OpenAPI document describes the ``data`` parameter as without a DTO.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from types import NoneType
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import get, post, put
from litestar.dto import AbstractDTO, DTOFieldDefinition
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.openapi.spec import Reference, Schema
from litestar.typing import FieldDefinition
from typing_extensions import override

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.identity import ROLES

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator

ALL_ROLES = frozenset(ROLES)
SYSCALL = "syscall"
"""The key of a route handler's ``opt`` that holds its ``Syscall``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Syscall:
    """One route as the gate sees it."""

    name: str
    """The op: what the call is audited under (and metrics labelled with)."""
    roles: frozenset[str] = ALL_ROLES
    tenant_gate: bool = True
    """False: a suspended tenant may still call it (compliance, its own policy)."""
    query: frozenset[str] = frozenset()
    """The query parameters it reads; any other is refused."""
    allow: frozenset[str] = frozenset()
    """Identity-named fields it takes at the top level (an admin names a new key's actor)."""
    per_item: frozenset[str] = frozenset()
    """Top-level fields whose members the route reads one by one (a batch)."""


def syscall_of(handler: BaseRouteHandler | None) -> Syscall | None:
    """The route's syscall, or None for a route outside the gate (health, docs, console)."""
    found = handler.opt.get(SYSCALL) if handler is not None else None
    return found if isinstance(found, Syscall) else None


def body_type(handler: HTTPRouteHandler) -> type[msgspec.Struct] | None:
    """The struct the handler's ``data`` parameter takes (``X | None`` reads as ``X``)."""
    field = handler.parsed_data_field
    if field is None:
        return None
    annotation = (
        next((a for a in field.args if a is not NoneType), None) if field.is_optional else field.annotation
    )
    if not (isinstance(annotation, type) and issubclass(annotation, msgspec.Struct)):
        msg = f"{handler.handler_name}: a syscall's data must be a msgspec struct, not {annotation!r}"
        raise TypeError(msg)
    return annotation


class GateDecoded(AbstractDTO[Any]):
    """The data DTO of every syscall: the body is the struct the gate decoded (``Call.body``),
    so Litestar neither decodes nor converts it again."""

    @override
    def decode_bytes(self, value: bytes) -> Any:
        body = getattr(getattr(self.asgi_connection.state, "call", None), "body", None)
        if body is None:  # a syscall route always passes the gate first: fail closed anyway
            raise InvalidRequest("the request body did not pass the gate")
        return body

    @override
    def decode_builtins(self, value: dict[str, Any]) -> Any:
        return self.decode_bytes(b"")

    @classmethod
    @override
    def create_for_field_definition(
        cls, field_definition: FieldDefinition, handler_id: str, backend_cls: Any = None
    ) -> None:
        """Nothing to build: the gate decodes."""

    @classmethod
    @override
    def create_openapi_schema(
        cls, field_definition: FieldDefinition, handler_id: str, schema_creator: SchemaCreator
    ) -> Reference | Schema:
        """The schema of the declared type, as a handler without a DTO documents it."""
        return schema_creator.for_field_definition(field_definition)

    @classmethod
    @override
    def generate_field_definitions(cls, model_type: type[Any]) -> Generator[DTOFieldDefinition, None, None]:
        yield from ()

    @classmethod
    @override
    def detect_nested_field(cls, field_definition: FieldDefinition) -> bool:
        return False


def _options(call: Syscall, options: dict[str, Any]) -> dict[str, Any]:
    return {"opt": {SYSCALL: call}, "dto": GateDecoded, "return_dto": None, "sync_to_thread": True, **options}


def syscall_post(path: str, call: Syscall, **options: Any) -> post:
    """``@post`` for a syscall: gated, its body handed over by the gate, answering 200."""
    return post(path, **_options(call, {"status_code": 200, **options}))


def syscall_put(path: str, call: Syscall, **options: Any) -> put:
    return put(path, **_options(call, {"status_code": 200, **options}))


def syscall_get(path: str, call: Syscall, **options: Any) -> get:
    return get(path, **_options(call, options))
