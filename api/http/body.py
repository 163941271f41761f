"""A syscall's request body, decoded once into the struct its handler takes, or refused
with the reason: malformed JSON, not an object, nested deeper than ``MAX_JSON_DEPTH``,
text PostgreSQL cannot store, an identity field (``identity_in_body``), an unknown field or
a wrong value. Messages never copy caller text raw: storable problems name the field,
decoder messages are escaped.

The happy path is one typed decode. Only a body that fails it is read again, leniently, to
tell which of the reasons above is the first (in that order, the order callers rely on).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, TypeVar
from urllib.parse import unquote_to_bytes

import msgspec
import msgspec.inspect as mi
import numpy as np
from litestar import Litestar
from litestar.routes import HTTPRoute

from memwarden.api.http.routing import Syscall, body_type, syscall_of
from memwarden.api.http.schemas import Body
from memwarden.domain.model.errors import DomainError, IdentityInBody, InvalidRequest
from memwarden.domain.model.storable import check_storable, unstorable_field
from memwarden.domain.model.text import escape_unprintable

S = TypeVar("S", bound=msgspec.Struct)
IDENTITY_FIELDS = frozenset({"namespace", "actor", "role", "tenant", "agent_id"})
MAX_JSON_DEPTH = 32
"""No body needs more nesting; a deeper one is refused before it is decoded."""
# A string runs to its closing quote or, unterminated, to the end of the body: the match never
# fails, so the engine never retries it from each later quote (an unterminated run of \"
# escapes made that quadratic). The unrolled loop has one way to match each byte: linear.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENING = np.frombuffer(b"[{", dtype=np.uint8)


def decode_body(raw: bytes, struct: type[S], call: Syscall) -> S:
    """The body as ``struct``, or the DomainError saying why not. An empty body is ``{}``.
    Identity is refused anywhere in it (``call.allow`` names the fields a route takes at the
    top level); ``call.per_item`` fields are the route's to read one by one (a batch: an
    unstorable value rejects its item alone). Whitespace alone is not JSON: it is refused."""
    data = raw or b"{}"
    if nests_deeper_than(data, MAX_JSON_DEPTH):
        raise InvalidRequest(f"the body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = msgspec.json.decode(data, type=struct)
    except msgspec.DecodeError as error:  # a ValidationError too
        raise _refusal(data, error, call) from error
    if not isinstance(body, Body):  # a Body checked its own values while it was decoded
        check_storable(body)
    named = identity_named(body, call.allow) if _holds_mappings(struct) else None
    if named is not None:
        raise _identity_in_body(named)
    return body


def _refusal(data: bytes, error: msgspec.DecodeError, call: Syscall) -> DomainError:
    """Why a body failed its typed decode: the first problem in the order of the module doc."""
    try:
        generic = msgspec.json.decode(data)
    except msgspec.DecodeError as malformed:
        return InvalidRequest(_malformed(data, malformed))
    if not isinstance(generic, dict):
        return InvalidRequest("the body must be a JSON object")
    problem = unstorable_field({name: value for name, value in generic.items() if name not in call.per_item})
    if problem is not None:
        return InvalidRequest(problem)
    named = identity_named(generic, call.allow)
    if named is not None:
        return _identity_in_body(named)
    return InvalidRequest(escape_unprintable(str(error)[:300]))


def _identity_in_body(name: str) -> IdentityInBody:
    return IdentityInBody(f"identity comes from the API key; the body names {name!r}")


def identity_named(value: Any, allowed: frozenset[str]) -> str | None:
    """The first identity field named anywhere in a body, as decoded JSON (``allowed`` ones
    only at the top level) or as its struct (whose own fields are checked at start-up by
    ``check_body_types``: only mappings inside it can name one). Iterative: a deeply nested
    body cannot exhaust the stack."""
    pending: list[tuple[Any, bool]] = [(value, True)]
    while pending:
        item, top = pending.pop()
        if isinstance(item, dict):
            for key, member in item.items():
                if key in IDENTITY_FIELDS and not (top and key in allowed):
                    return str(key)
                pending.append((member, False))
        elif isinstance(item, msgspec.Struct):
            pending.extend((getattr(item, name), False) for name in item.__struct_fields__)
        elif isinstance(item, list | tuple):
            pending.extend((member, False) for member in item)
    return None


def nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text opens more than ``limit`` arrays/objects inside each other
    (brackets inside strings do not count). Checked before decoding: the decoder recurses.
    Linear in the body's length, and vectorized, so a body at the size limit costs the event
    loop milliseconds whatever it holds."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return False
    steps = np.where(np.isin(np.frombuffer(brackets, dtype=np.uint8), _OPENING), 1, -1)
    return bool(np.cumsum(steps).max() > limit)


def _malformed(data: bytes, error: msgspec.DecodeError) -> str:
    """Why the body is not JSON. The decoder calls a lone surrogate escape (``"\\ud800"``)
    malformed; the standard library reads it, so its field can be named like any other."""
    try:
        lenient = json.loads(data)
    except (ValueError, RecursionError):
        lenient = None
    unstorable = unstorable_field(lenient) if lenient is not None else None
    return unstorable or escape_unprintable(f"malformed JSON: {error}"[:300])


def check_body_types(app: Litestar) -> None:
    """At start-up: every syscall's body is a struct, and no struct in it has a field named
    like an identity (only a route's ``allow`` ones at the top level), so that a struct's
    fields never need the check a mapping's keys get on every request."""
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                call = syscall_of(handler)
                struct = body_type(handler) if call is not None else None
                if call is not None and struct is not None:
                    _check_field_names(call, struct)


def _check_field_names(call: Syscall, struct: type[msgspec.Struct]) -> None:
    for info in _struct_infos(struct):
        top = info.cls is struct
        for field in info.fields:
            if field.encode_name in IDENTITY_FIELDS and not (top and field.encode_name in call.allow):
                msg = f"{call.name}: {info.cls.__name__}.{field.encode_name} is named like an identity field"
                raise TypeError(msg)


@functools.cache
def _holds_mappings(struct: type[msgspec.Struct]) -> bool:
    """Whether a body of this type can hold a mapping, whose keys the caller chooses (and
    could name an identity with). Most bodies cannot: their walk is skipped."""
    return any(isinstance(t, _MAPPINGS) for t in _types_in(struct))


def _struct_infos(struct: type[msgspec.Struct]) -> list[mi.StructType]:
    return [t for t in _types_in(struct) if isinstance(t, mi.StructType)]


_MAPPINGS = (mi.DictType, mi.AnyType, mi.TypedDictType, mi.DataclassType, mi.NamedTupleType, mi.CustomType)


def _types_in(struct: type[msgspec.Struct]) -> list[mi.Type]:
    """Every type a body of this struct can hold, the struct's own included (each once)."""
    found: list[mi.Type] = []
    seen: set[type[Any]] = set()
    pending: list[mi.Type] = [mi.type_info(struct)]
    while pending:
        info = pending.pop()
        if isinstance(info, mi.StructType):
            if info.cls in seen:
                continue
            seen.add(info.cls)
            pending.extend(field.type for field in info.fields)
        found.append(info)
        pending.extend(_inner(info))
    return found


def _inner(info: mi.Type) -> list[mi.Type]:
    if isinstance(info, mi.UnionType):
        return list(info.types)
    if isinstance(info, mi.TupleType):
        return list(info.item_types)
    if isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        return [info.item_type]
    if isinstance(info, mi.Metadata):
        return [info.type]
    return []


def urlencoded_utf8(raw: bytes) -> bool:
    """Whether every field of a URL-encoded string (a query string, a form body) decodes as
    UTF-8: a decoder would turn a stray byte or an encoded lone surrogate into U+FFFD and pass
    it on as if the caller had sent it."""
    try:
        for field in raw.split(b"&"):
            unquote_to_bytes(field.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
