"""``/mcp``: MCP over streamable HTTP, mounted in the Litestar app. The request passes the
app's authentication middleware like any other (no valid key, no MCP); each tool call is
then sent back into the same app as its syscall, with the request's ``Authorization``
header (api/mcp/syscalls.py), so it is gated, rate-limited and audited as over HTTP.

Stateless, JSON answers: a tool call is one POST, and any API process can answer it."""

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
from api.mcp.server import build_server
from api.mcp.syscalls import AppSyscalls

MCP_PATH = "/mcp"
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

    def bind(self, app: Litestar) -> None:
        self._syscalls = AppSyscalls(app)
        self._manager = StreamableHTTPSessionManager(
            build_server(self._syscalls, _authorization),
            json_response=True,
            stateless=True,
            # a syscall body over the API's limit reaches the gate, which answers too_large
            max_request_body_size=4 * MAX_BODY_BYTES,
        )

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
            assert endpoint._manager is not None
            await endpoint._manager.handle_request(scope, receive, send)  # type: ignore[arg-type]

        return mcp_endpoint
