"""A deadline per request: whatever a request waits on (a pooled connection, a statement that
never returns because the database froze, a commit), its caller has an answer within the
deadline — 503 ``unavailable`` with ``Retry-After`` — instead of hanging with it.

The database driver blocks a thread and cannot be interrupted from outside, so the request
goes on in the background (it finishes, audits and releases its connection when the database
answers again); only its late answer is dropped, since the caller already has one."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable

import msgspec
from litestar.enums import ScopeType
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Message,
    Receive,
    Scope,
    Send,
)

log = logging.getLogger(__name__)

EXEMPT_PATHS = frozenset({"/healthz"})
"""Answers that touch no database: never cut short."""


class Deadline:
    """ASGI middleware: ``seconds()`` (read per request, so a runtime opened after the app was
    built decides) bounds how long any HTTP request waits before its response starts."""

    def __init__(self, app: ASGIApp, seconds: Callable[[], float]) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope["path"] in EXEMPT_PATHS:
            await self.app(scope, receive, send)
            return
        started = False
        answered = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if answered:
                return  # the caller already has the deadline's 503
            started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, guarded_send))
        seconds = self.seconds()
        done, _ = await asyncio.wait({task}, timeout=seconds)
        if done or started:
            await task  # finished, or already streaming its answer: let it end as it will
            return
        answered = True
        task.add_done_callback(_log_late_failure)
        log.warning("%s: no answer within %.1f s; 503 sent", scope["path"], seconds)
        await _unavailable(send, seconds)


async def _unavailable(send: Send, seconds: float) -> None:
    body = msgspec.json.encode(
        {"error": "unavailable", "detail": f"no answer within the request deadline of {seconds:g} s"}
    )
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": 503,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(max(1, math.ceil(seconds))).encode()),
        ],
    }
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(start)
    await send(end)


def _log_late_failure(task: asyncio.Future[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        error = task.exception()
        if error is not None:
            log.warning("a request answered by its deadline failed later: %s", type(error).__name__)
