"""The HTTP edge's body decoding (api/http/body.py) and route descriptions (api/http/routing.py):
one typed decode, the refusals in their order, and the start-up checks of the body types."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from litestar import Controller, Litestar, Request
from litestar.params import JSONBody
from litestar.routes import HTTPRoute
from litestar.testing import TestClient

from memwarden.api.http.body import check_body_types, decode_body
from memwarden.api.http.routing import Syscall, body_type, syscall_of, syscall_post
from memwarden.api.http.schemas import Body, NewKeyBody, WriteBatchBody, WriteBody
from memwarden.domain.model.certificates import DeletionCertificate
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.errors import IdentityInBody, InvalidRequest

WRITE = Syscall(name="write")
BATCH = Syscall(name="write_batch", per_item=frozenset({"items"}))


def test_a_write_body_decodes_into_its_struct_and_makes_the_command() -> None:
    body = decode_body(b'{"content": "tea", "subject": "ada", "async": true}', WriteBody, WRITE)
    assert isinstance(body, WriteBody)
    assert body.run_async
    assert body.command() == WriteMemory(content="tea", subject="ada")


@pytest.mark.parametrize(
    ("raw", "error", "message"),
    [
        (b'{"content": "x", "namespace": "/other"}', IdentityInBody, "the body names 'namespace'"),
        (b'{"content": "x", "provenance": {"actor": "m"}}', IdentityInBody, "the body names 'actor'"),
        (b'{"content": "x", "colour": "red"}', InvalidRequest, "unknown field `colour`"),
        (b'{"content": 5}', InvalidRequest, "Expected `str`, got `int`"),
        (b"[1]", InvalidRequest, "the body must be a JSON object"),
        (b'{"content": "x"', InvalidRequest, "malformed JSON"),
        (b'{"content": "a\\u0000b", "colour": 1}', InvalidRequest, "content contains"),
        (b'{"content": "\\ud800", "namespace": "/x"}', InvalidRequest, "content contains a lone surrogate"),
        (b"[" * 40 + b"]" * 40, InvalidRequest, "deeper than 32 levels"),
    ],
)
def test_a_refused_body_says_its_first_problem(raw: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as refused:
        decode_body(raw, WriteBody, WRITE)
    assert type(refused.value) is error


def test_identity_inside_a_batch_item_refuses_the_batch_but_a_bad_value_only_its_item() -> None:
    with pytest.raises(IdentityInBody, match="'role'"):
        decode_body(
            b'{"items": [{"content": "a"}, {"content": "b", "role": "owner"}]}', WriteBatchBody, BATCH
        )
    batch = decode_body(b'{"items": [{"content": "a"}, {"content": "b\\u0000"}]}', WriteBatchBody, BATCH)
    first, second = batch.entries()
    assert not hasattr(first, "reason")
    assert getattr(second, "reason", None) == "unstorable"


def test_allowed_identity_fields_are_taken_at_the_top_level_only() -> None:
    call = Syscall(name="admin.keys.create", allow=frozenset({"actor", "role"}))
    body = decode_body(b'{"target": "/t", "actor": "bot", "role": "agent"}', NewKeyBody, call)
    assert (body.actor, body.role) == ("bot", "agent")
    with pytest.raises(IdentityInBody):
        decode_body(b'{"target": "/t", "actor": "bot", "role": "agent", "tenant": "x"}', NewKeyBody, call)


def test_an_empty_body_is_an_empty_object_and_whitespace_alone_is_not_json() -> None:
    with pytest.raises(InvalidRequest, match="missing required field `content`"):
        decode_body(b"", WriteBody, WRITE)
    with pytest.raises(InvalidRequest, match="malformed JSON"):
        decode_body(b"  ", WriteBody, WRITE)


class Nested(msgspec.Struct, frozen=True):
    tenant: str = ""


class SneakyBody(Body, frozen=True, kw_only=True):
    inner: Nested = Nested()


class SneakyController(Controller):
    path = "/v1/sneaky"

    @syscall_post("/", Syscall(name="sneaky"))
    def sneaky(self, request: Request[Any, Any, Any], data: JSONBody[SneakyBody]) -> None:
        """A struct field named like an identity would pass the per-request walk unseen."""


def test_a_body_type_with_an_identity_named_field_fails_at_start_up() -> None:
    app = Litestar([SneakyController])
    routes = [route for route in app.routes if isinstance(route, HTTPRoute)]
    handler = next(h for route in routes for h in route.route_handlers if syscall_of(h) is not None)
    assert body_type(handler) is SneakyBody  # read from the handler's data parameter
    with pytest.raises(TypeError, match=r"sneaky: Nested\.tenant is named like an identity field"):
        check_body_types(app)


def test_a_certificate_time_without_a_zone_is_refused_like_any_other_time() -> None:
    certificate = {
        "id": "00000000-0000-0000-0000-000000000001",
        "erased_ids": [],
        "count": 0,
        "scope": "/a",
        "target_kind": "subtree",
        "ledger_position": 1,
        "ledger_hash": "00",
        "time": "2026-01-01T00:00:00",
        "requester": "a",
        "requester_namespace": "/a",
        "requester_role": "admin",
        "reason": "r",
        "key_id": "k",
    }
    call = Syscall(name="compliance.certificates.verify")
    with pytest.raises(InvalidRequest, match=r"^time has no time zone"):
        decode_body(msgspec.json.encode(certificate), DeletionCertificate, call)


class Handed(msgspec.Struct):
    """What a stand-in gate leaves on the request: the struct the handler must receive."""

    body: msgspec.Struct


async def stand_in_gate(request: Request[Any, Any, Any]) -> None:
    request.state.call = Handed(WriteBody(content="decoded by the gate"))


class EchoController(Controller):
    path = "/v1/echo"

    @syscall_post("/", Syscall(name="echo"))
    def echo(self, data: JSONBody[WriteBody]) -> dict[str, str]:
        return {"content": data.content}


def test_the_handler_gets_the_gates_struct_and_litestar_decodes_nothing() -> None:
    app = Litestar([EchoController], before_request=stand_in_gate)
    with TestClient(app) as client:
        # bytes that are no WriteBody at all: had Litestar decoded them, this would be a 400
        answer = client.post("/v1/echo", content=b'{"not": "a write"}')
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"content": "decoded by the gate"}
