"""``memwarden mcp``: MCP over stdio for one agent. The key is ``MEMWARDEN_API_KEY``; tool
calls go to the ``memwarden serve`` at ``MEMWARDEN_URL`` when it is set, else through the
app opened in this process on the local database (``DATABASE_URL`` or the embedded
default), the same app ``memwarden serve`` runs. Stdout carries the protocol only."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

from memwarden.api.mcp.server import build_server
from memwarden.api.mcp.syscalls import AppSyscalls, RemoteSyscalls
from memwarden.domain.settings import Settings


async def _run(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_stdio(key: str, settings: Settings) -> None:
    """Serve MCP on stdio with ``key``: against the API at ``settings.mcp_url``, else
    against the deployment ``settings`` name, opened in this process."""
    header, url = f"Bearer {key}", settings.mcp_url

    def authorization(_ctx: ServerRequestContext[Any, Any]) -> str:
        return header

    if url:
        remote = RemoteSyscalls(url)
        try:
            await _run(build_server(remote, authorization))
        finally:
            await remote.close()
        return
    from memwarden.api.http.app import create_app  # noqa: PLC0415 - the local app only when no URL is given

    app = create_app(settings, document=False)
    async with app.lifespan():
        role = _local_role(app, key)

        def role_of(_ctx: ServerRequestContext[Any, Any]) -> str | None:
            return role

        await _run(build_server(AppSyscalls(app), authorization, role_of))


def _local_role(app: Any, key: str) -> str | None:
    """The key's role on the local database (None: not a valid key; every tool is listed and
    each call is refused by the gate as unauthenticated)."""
    from memwarden.api.http.state import STATE_KEY  # noqa: PLC0415 - the local app only

    found = app.state[STATE_KEY].governance.authenticate(key)
    return found.identity.role if found is not None else None
