"""The fast path of /mcp (api/mcp/fast.py) against the SDK's own path, over real HTTP: the
official client's tool calls take the fast path, and every answer it gives is the one the
SDK gives for the same call (the SDK path is reached by the same request with its
``Mcp-Name`` header in the protocol's base64 form, which the fast path leaves to the SDK)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memwarden.api.mcp.fast import routing_headers, tool_call
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import issue_key
from tests.e2e.mcp_helpers import served_app

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fast-path-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
Served = tuple[Runtime, str, str]


@pytest.fixture
def served(settings: Settings) -> Iterator[Served]:
    with Runtime(settings) as runtime, served_app(runtime) as base:
        yield runtime, base, issue_key(runtime, "acme/eng", "bot", "agent")


def _headers(key: str, name: str, *, sdk: bool = False) -> dict[str, str]:
    wrapped = f"=?base64?{base64.b64encode(name.encode()).decode()}?="
    return {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": wrapped if sdk else name,
    }


def _body(name: str, arguments: Any, request_id: int | str = 3) -> bytes:
    params: dict[str, Any] = {"name": name, "_meta": META}
    if arguments is not None:
        params["arguments"] = arguments
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()


def _raw(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


def _both(base: str, key: str, name: str, arguments: Any, request_id: int | str = 3) -> tuple[Any, Any]:
    body = _body(name, arguments, request_id)
    assert tool_call(routing_headers(_raw(_headers(key, name))) or {}, body) is not None
    assert tool_call(routing_headers(_raw(_headers(key, name, sdk=True))) or {}, body) is None
    answers = []
    for sdk in (False, True):
        answer = httpx.post(f"{base}/mcp", content=body, headers=_headers(key, name, sdk=sdk), timeout=30)
        assert answer.headers["content-type"] == "application/json"
        answers.append((answer.status_code, answer.json()))
    return answers[0], answers[1]


def test_the_fast_path_answers_as_the_sdk_does(served: Served) -> None:
    _runtime, base, key = served
    written = httpx.post(
        f"{base}/v1/mem/write",
        json={"content": "The staging database is Postgres 16 — café ünïcode"},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    ).json()
    cases: list[tuple[str, Any, int | str]] = [
        ("read", {"id": written["id"]}, 3),  # a success, non-ASCII text included
        ("read", {"id": "00000000-0000-0000-0000-000000000000"}, "req-7"),  # the API's 404
        ("read", {"id": "not-a-uuid"}, 0),  # the API's 400
        ("read", None, 5),  # no arguments
        ("stats", {}, 6),
        ("nope", {}, 8),  # no such tool
        ("write", {"content": "x", "namespace": "other"}, 9),  # identity in the arguments
    ]
    for name, arguments, request_id in cases:
        fast, sdk = _both(base, key, name, arguments, request_id)
        if name == "stats":  # counts move with each call's audit record: compare the shape
            assert fast[0] == sdk[0] == 200
            assert fast[1]["result"].keys() == sdk[1]["result"].keys()
            continue
        assert fast == sdk, (name, arguments)
    assert fast[1]["result"]["isError"] is True


@pytest.mark.parametrize(
    ("change", "what"),
    [
        (lambda h, b: ({**h, "Mcp-Method": "tools/list"}, b), "method header disagrees"),
        (lambda h, b: ({**h, "Mcp-Name": "write"}, b), "name header disagrees"),
        (lambda h, b: ({**h, "Mcp-Protocol-Version": "2025-06-18"}, b), "handshake-era version"),
        (lambda h, b: ({**h, "Accept": "text/html"}, b), "accepts no JSON"),
        (lambda h, b: ({**h, "Content-Type": "text/plain"}, b), "not JSON"),
        (lambda h, b: ({**h, "Mcp-Param-Id": "1"}, b), "a parameter header"),
        (lambda h, b: (h, b.replace(b'"2.0"', b'"1.0"')), "not JSON-RPC 2.0"),
        (lambda h, b: (h, b.replace(b'"id": 3', b'"id": true')), "a boolean id"),
        (lambda h, b: (h, b.replace(b'"params"', b'"extra": 1, "params"')), "an extra member"),
        (lambda h, b: (h, b.replace(b'clientCapabilities": {}', b'clientCapabilities": 5')), "bad _meta"),
        (lambda h, b: (h, b[:-1]), "not JSON at all"),
    ],
)
def test_anything_unusual_is_left_to_the_sdk(served: Served, change: Any, what: str) -> None:
    _runtime, base, key = served
    headers, body = change(
        _headers(key, "read"), _body("read", {"id": "00000000-0000-0000-0000-000000000000"})
    )
    assert tool_call(routing_headers(_raw(headers)) or {}, body) is None, what
    answer = httpx.post(f"{base}/mcp", content=body, headers=headers, timeout=30)
    assert answer.status_code in {200, 400, 406, 500}, (what, answer.status_code, answer.text)
    if answer.status_code == 200 and "result" in answer.json():
        assert answer.json()["result"]["isError"] is True  # the SDK's own answer: not found, as a tool error


def test_the_official_clients_tool_calls_take_the_fast_path(served: Served) -> None:
    _runtime, base, key = served
    seen: list[tuple[list[tuple[bytes, bytes]], bytes]] = []

    async def record(request: Any) -> None:
        if b'"tools/call"' in request.content:
            seen.append(([(k.lower(), v) for k, v in request.headers.raw], request.content))

    async def scenario() -> None:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"}, event_hooks={"request": [record]}
            ) as http,
            Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
        ):
            stored = await client.call_tool("write", {"content": "Builds run on arm64 since March"})
            assert stored.is_error is False
            read = await client.call_tool("read", {"id": stored.structured_content["id"]})  # type: ignore[index]
            assert read.structured_content["content"] == "Builds run on arm64 since March"  # type: ignore[index]

    anyio.run(scenario)
    assert len(seen) == 2
    for raw, body in seen:
        headers = routing_headers(raw)
        assert headers is not None
        assert tool_call(headers, body) is not None
