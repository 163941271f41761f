"""``/mcp``: MCP over streamable HTTP, mounted in the Litestar app. The request passes the
app's authentication middleware like any other (no valid key, no MCP); each tool call is
then sent back into the same app as its syscall, with the request's ``Authorization``
header (api/mcp/syscalls.py), so it is gated, rate-limited and audited as over HTTP.

Stateless, JSON answers: a tool call is one POST, and any API process can answer it. The
common one (a ``tools/call`` of the current protocol) is answered by api/mcp/fast.py; the
SDK answers everything else (api/mcp/streamable.py, imported on the first request: most
processes that serve the API never answer one, and the SDK costs a second to import)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup
from litestar import Litestar, asgi
from litestar.handlers import ASGIRouteHandler
from litestar.types import Receive, Scope, Send

from memwarden.api.http.routing import SYSCALL, Syscall

if TYPE_CHECKING:
    from memwarden.api.mcp.streamable import McpService

MCP_PATH = "/mcp"
logging.getLogger("mcp").setLevel(logging.WARNING)
"""The SDK logs a line at INFO for every stateless request it serves; the API's own
metrics and audit records say what was called."""


def _service_class() -> type[McpService]:
    from memwarden.api.mcp.streamable import McpService  # noqa: PLC0415 - the SDK on the first /mcp request

    return McpService


class McpEndpoint:
    """The mount; ``bind`` gives it the app its tool calls enter. The SDK's session manager
    is made and started on the first request, inside the app's lifespan."""

    def __init__(self) -> None:
        self._app: Litestar | None = None
        self._service: McpService | None = None
        self._tasks: TaskGroup | None = None
        self._closing: anyio.Event | None = None
        self._starting: anyio.Lock | None = None

    def bind(self, app: Litestar) -> None:
        self._app = app

    async def _started(self) -> McpService:
        assert self._starting is not None, "McpEndpoint.lifespan first"
        async with self._starting:
            if self._service is None:
                assert self._app is not None, "McpEndpoint.bind(app) first"
                assert self._tasks is not None
                assert self._closing is not None
                service = (await anyio.to_thread.run_sync(_service_class))(self._app)
                await self._tasks.start(service.run, self._closing)
                self._service = service
        return self._service

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        service = self._service or await self._started()
        await service.serve(scope, receive, send)

    @asynccontextmanager
    async def lifespan(self, _app: Litestar) -> AsyncIterator[None]:
        assert self._app is not None, "McpEndpoint.bind(app) first"
        self._closing, self._starting = anyio.Event(), anyio.Lock()
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                try:
                    yield
                finally:
                    self._closing.set()  # the session manager, if started, stops
        finally:
            self._service = self._tasks = None

    def handler(self) -> ASGIRouteHandler:
        endpoint = self

        # the syscall's name: what an unauthenticated request is audited under (the gate hook
        # is HTTP-only: each tool call is the syscall's own gated request)
        @asgi(MCP_PATH, opt={SYSCALL: Syscall(name="mcp")}, copy_scope=True)
        async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
            await endpoint.serve(scope, receive, send)

        return mcp_endpoint
