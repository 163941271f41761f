"""The SDK side of ``/mcp`` (api/mcp/http.py mounts it): the official ``mcp`` package's
session manager and, for a common tool call, the fast path of api/mcp/fast.py. Importing
the SDK costs about a second of CPU, so api/mcp/http.py imports this module on the first
request to ``/mcp``, not in every process that serves the API."""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import TaskStatus
from litestar import Litestar
from litestar.types import Receive, Scope, Send
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from memwarden.api.http.gate import Principal
from memwarden.api.http.state import MAX_BODY_BYTES
from memwarden.api.mcp.fast import response, routing_headers, tool_call
from memwarden.api.mcp.server import build_server, call_tool
from memwarden.api.mcp.syscalls import AppSyscalls

MAX_MCP_BODY = 4 * MAX_BODY_BYTES
"""A syscall body over the API's limit still reaches the gate, which answers too_large."""


def _authorization(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    headers = getattr(request, "headers", None)
    return str(headers.get("authorization", "")) if headers is not None else ""


def _role(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The role of the key the app's authentication middleware accepted for this request
    (``/mcp`` is not public: no valid key, no MCP)."""
    scope = getattr(ctx.request, "scope", None)
    principal = scope.get("user") if isinstance(scope, dict) else None
    return principal.identity.role if isinstance(principal, Principal) else None


class McpService:
    """The session manager of one app, its tool calls sent into that app."""

    def __init__(self, app: Litestar) -> None:
        self._syscalls = AppSyscalls(app)
        server = build_server(self._syscalls, _authorization, _role)
        self._server_info: dict[str, Any] = server.server_info_stamp  # encoded into each answer, never kept
        self._manager = StreamableHTTPSessionManager(
            server, json_response=True, stateless=True, max_request_body_size=MAX_MCP_BODY
        )

    async def run(
        self, closing: anyio.Event, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The session manager's task group, open until ``closing`` is set."""
        async with self._manager.run():
            task_status.started()
            await closing.wait()

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A common tool call on the fast path, anything else (its body replayed) by the SDK."""
        headers = routing_headers(scope["headers"]) if scope.get("method") == "POST" else None
        length = _content_length(scope["headers"])
        if headers is None or length is None or length > MAX_MCP_BODY:
            await self._manager.handle_request(scope, receive, send)  # type: ignore[arg-type]
            return
        body = await _read_body(receive)
        if body is None:
            return  # the client went away before its request was read: nobody to answer
        call = tool_call(headers, body)
        if call is None:
            await self._manager.handle_request(scope, _replay(body, receive), send)  # type: ignore[arg-type]
            return
        request_id, name, arguments = call
        answer = await call_tool(self._syscalls, name, arguments, headers.get("authorization", ""))
        payload = response(request_id, answer, self._server_info)
        start = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": start})
        await send({"type": "http.response.body", "body": payload, "more_body": False})


def _content_length(raw: Any) -> int | None:
    for name, value in raw:
        if name == b"content-length":
            return int(value) if value.isdigit() and len(value) <= 12 else None
    return None


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body (its length is bounded by Content-Length), or None on a disconnect."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the SDK the body already read, then the client's own events."""
    pending = [body]

    async def replay() -> Any:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replay
