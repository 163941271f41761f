"""The hot path of ``/mcp``: a well-formed ``tools/call`` of the current protocol (2026-07-28:
one self-contained POST, no session) is answered here, decoded once with msgspec, without
the SDK's per-request set-up and its re-validation of our own result. Anything else (an
older protocol version, ``initialize``, ``tools/list``, a notification, any envelope that is
not exactly the common shape) goes to the SDK unchanged, so every refusal and every rarer
method keeps the SDK's answer.

What is checked here is what the SDK checks on that path (``handle_modern_request``): the
Content-Type and Accept headers, the routing headers (present once, agreeing with the
body), the envelope's protocol version and ``_meta`` (validated by the SDK's own models,
once per distinct ``_meta``), the call's ``name`` and ``arguments``. The answer is the
SDK's wire form of the same result; tests/e2e/test_mcp_fast.py holds the two equal."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

import msgspec
from mcp_types import PROTOCOL_VERSION_META_KEY, SERVER_INFO_META_KEY
from mcp_types import methods as sdk_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from memwarden.api.mcp.server import ToolAnswer

Headers = dict[str, str]
_ROUTING = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})
_CALL_PARAMS = frozenset({"name", "arguments", "_meta"})
_ENCODER = msgspec.json.Encoder()


def routing_headers(raw: Iterable[tuple[bytes, bytes]]) -> Headers | None:
    """The headers the fast path reads, or None when it must leave the request to the SDK
    (a routing header twice, an ``Mcp-Param-*`` header, a header that is not ASCII)."""
    found: Headers = {}
    for name, value in raw:
        if name in _ROUTING and name.decode() in found:
            return None
        if name.startswith(b"mcp-param-") or not value.isascii():
            return None
        if name in (*_ROUTING, b"content-type", b"accept", b"authorization"):
            found[name.decode()] = value.decode()
    return found


def _accepts_json(accept: str) -> bool:
    """The SDK's Accept rule (wildcards included) for ``application/json``."""
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    return bool(types & {"application/json", "application/*", "*/*"})


@functools.lru_cache(maxsize=256)
def _meta_accepted(version: str, meta_json: bytes) -> bool:
    """Whether the SDK's models accept this ``_meta`` for a ``tools/call`` at ``version``
    (clients send the same one on every call, so this runs once per client)."""
    meta = msgspec.json.decode(meta_json)
    try:
        sdk_methods.validate_client_request("tools/call", version, {"name": "x", "_meta": meta})
    except (ValidationError, KeyError):
        return False
    return True


def tool_call(headers: Headers, body: bytes) -> tuple[int | str, str, dict[str, Any] | None] | None:
    """``(id, name, arguments)`` of a ``tools/call`` the fast path answers, or None."""
    version = headers.get("mcp-protocol-version")
    if (
        version not in MODERN_PROTOCOL_VERSIONS
        or not headers.get("content-type", "").lower().startswith("application/json")
        or not _accepts_json(headers.get("accept", ""))
        or headers.get("mcp-method") != "tools/call"
    ):
        return None
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    if not isinstance(decoded, dict) or decoded.keys() != _ENVELOPE or decoded["jsonrpc"] != "2.0":
        return None
    request_id, params = decoded["id"], decoded["params"]
    if (
        type(request_id) not in (int, str)
        or decoded["method"] != "tools/call"
        or not isinstance(params, dict)
    ):
        return None
    name, arguments, meta = params.get("name"), params.get("arguments"), params.get("_meta")
    if (
        not params.keys() <= _CALL_PARAMS
        or not isinstance(name, str)
        or headers.get("mcp-name") != name
        or not (arguments is None or isinstance(arguments, dict))
        or not isinstance(meta, dict)
        or meta.get(PROTOCOL_VERSION_META_KEY) != version
        or not _meta_accepted(version, _ENCODER.encode(meta))
    ):
        return None
    return request_id, name, arguments


def response(request_id: int | str, answer: ToolAnswer, server_info: dict[str, Any]) -> bytes:
    """The JSON-RPC response the SDK would send for ``answer``."""
    result = {**answer.wire(), "resultType": "complete", "_meta": {SERVER_INFO_META_KEY: server_info}}
    message = {"jsonrpc": "2.0", "id": request_id, "result": result}
    try:
        return _ENCODER.encode(message)
    except (msgspec.EncodeError, UnicodeEncodeError):  # a lone surrogate: escaped as the SDK does
        return json.dumps(message, separators=(",", ":")).encode("ascii")
