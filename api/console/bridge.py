"""Console calls to the HTTP API, in process: the same ASGI app, gate and audit as any
client, with the session's key as the bearer token."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
from litestar import Request

from memwarden.domain.model.text import escape_unprintable

INTERNAL_BASE = "http://console.internal"


class ApiRefused(Exception):
    """The API refused or failed the call: its status, code and detail (already escaped)."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


async def call_api(
    request: Request[Any, Any, Any],
    key: str,
    method: str,
    path: str,
    *,
    body: Any = None,
    raw: bytes | None = None,
    params: dict[str, str] | None = None,
) -> Any:
    """The API's decoded JSON answer, or ApiRefused with its error. ``raw`` is sent as the
    body unchanged (pasted JSON): the gate checks it like any client's."""
    content = raw if raw is not None else (msgspec.json.encode(body) if body is not None else None)
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    app: Any = request.app  # an ASGI app; httpx types its callable more narrowly than Litestar
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=INTERNAL_BASE, timeout=120) as client:
        answer = await client.request(method, path, content=content, headers=headers, params=params)
    try:
        decoded = msgspec.json.decode(answer.content) if answer.content else None
    except msgspec.DecodeError:
        decoded = None
    if answer.status_code >= 400:
        error = decoded if isinstance(decoded, dict) else {}
        raise ApiRefused(
            answer.status_code,
            escape_unprintable(str(error.get("error", "error"))[:60]),
            escape_unprintable(str(error.get("detail", answer.reason_phrase))[:500]),
        )
    return decoded
