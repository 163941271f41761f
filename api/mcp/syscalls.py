"""How a tool call reaches its syscall: as the syscall's own HTTP request, with the caller's
``Authorization`` header, so the app's authentication, gate, rate limit, audit and error
mapping are the ones that decide. ``AppSyscalls`` sends it through an ASGI app in this
process (``/mcp``, and ``memwarden mcp`` on the local database); ``RemoteSyscalls`` to a
``memwarden serve`` at ``MEMWARDEN_URL``."""

from __future__ import annotations

from typing import Any, Protocol

import httpx
import msgspec
from litestar.types import ASGIApp


class Reply(msgspec.Struct, frozen=True):
    status: int
    body: bytes
    retry_after: str | None = None


class Syscalls(Protocol):
    async def post(self, path: str, body: bytes, authorization: str) -> Reply: ...


class AppSyscalls:
    """Requests into an ASGI app already started, without a socket."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def post(self, path: str, body: bytes, authorization: str) -> Reply:
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": b"",
            "headers": [
                (b"host", b"mcp.internal"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"authorization", authorization.encode("latin-1", "replace")),
            ],
            "client": ("127.0.0.1", 0),
            "server": ("mcp.internal", 80),
            "state": {},
        }
        sent = False
        status, retry_after, chunks = 500, None, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status, retry_after
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", []):
                    if name.lower() == b"retry-after":
                        retry_after = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        app: Any = self.app  # the ASGI contract, not Litestar's typed events
        await app(scope, receive, send)
        return Reply(status, b"".join(chunks), retry_after)


class RemoteSyscalls:
    """Requests to a ``memwarden serve`` over HTTP (one pooled client)."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        self.client = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout)

    async def post(self, path: str, body: bytes, authorization: str) -> Reply:
        response = await self.client.post(
            path, content=body, headers={"Authorization": authorization, "Content-Type": "application/json"}
        )
        return Reply(response.status_code, response.content, response.headers.get("retry-after"))

    async def close(self) -> None:
        await self.client.aclose()
