"""``/mcp``: MCP over streamable HTTP, mounted in the Litestar app. The request passes the
app's authentication middleware like any other (no valid key, no MCP); each tool call is
then sent back into the same app as its syscall, with the request's ``Authorization``
header (api/mcp/syscalls.py), so it is gated, rate-limited and audited as over HTTP.

Stateless, JSON answers: a tool call is one POST, and any API process can answer it. The
common one (a ``tools/call`` of the current protocol) is answered by api/mcp/fast.py; the
SDK answers everything else."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from api.http.routing import SYSCALL, Syscall
from api.http.state import MAX_BODY_BYTES
from api.mcp.fast import response, routing_headers, tool_call
from api.mcp.server import build_server, call_tool
from api.mcp.syscalls import AppSyscalls

MCP_PATH = "/mcp"
MAX_MCP_BODY = 4 * MAX_BODY_BYTES
"""A syscall body over the API's limit still reaches the gate, which answers too_large."""
logging.getLogger("mcp").setLevel(logging.WARNING)
"""The SDK logs a line at INFO for every stateless request it serves; the API's own
metrics and audit records say what was called."""


def _authorization(ctx: ServerRequestContext[Any, Any]) -> str:
    request = ctx.request
    headers = getattr(request, "headers", None)
    return str(headers.get("authorization", "")) if headers is not None else ""


class McpEndpoint:
    """The mount and its session manager; ``bind`` gives it the app its tool calls enter."""

    def __init__(self) -> None:
        self._syscalls: AppSyscalls | None = None
        self._manager: StreamableHTTPSessionManager | None = None
        self._server_info: dict[str, Any] = {}

    def bind(self, app: Litestar) -> None:
        self._syscalls = AppSyscalls(app)
        server = build_server(self._syscalls, _authorization)
        self._server_info = server.server_info_stamp  # encoded at once into each answer, never kept
        self._manager = StreamableHTTPSessionManager(
            server, json_response=True, stateless=True, max_request_body_size=MAX_MCP_BODY
        )

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A common tool call on the fast path, anything else (its body replayed) by the SDK."""
        assert self._manager is not None
        assert self._syscalls is not None
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

    @asynccontextmanager
    async def lifespan(self, _app: Litestar) -> AsyncIterator[None]:
        assert self._manager is not None, "McpEndpoint.bind(app) first"
        async with self._manager.run():
            yield

    def handler(self) -> ASGIRouteHandler:
        endpoint = self

        # the syscall's name: what an unauthenticated request is audited under (the gate hook
        # is HTTP-only: each tool call is the syscall's own gated request)
        @asgi(MCP_PATH, opt={SYSCALL: Syscall(name="mcp")}, copy_scope=True)
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            await endpoint.serve(scope, receive, send)

        return mcp_endpoint


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
