"""What the sync and async clients share: a request struct as an HTTP request, an HTTP
answer as a result or the error's exception, and when to try again."""

from __future__ import annotations

import email.utils
import math
import time
from typing import Any, TypeVar
from urllib.parse import quote

import msgspec

from memwarden_client.errors import MemwardenError, Unavailable, error_for
from memwarden_client.requests import PagedRequest, Request

R = TypeVar("R")


class Prepared(msgspec.Struct, frozen=True):
    method: str
    path: str
    params: tuple[tuple[str, str], ...]
    content: bytes | None


class Retry(msgspec.Struct, frozen=True, kw_only=True):
    """Retries of 429 ``rate_limited`` and 503 (``projection_lag``, ``unavailable``), and of
    a connection that could not be made: up to ``attempts`` tries in all, waiting what
    ``Retry-After`` asks, else ``backoff`` doubled each time, at most ``max_delay``."""

    attempts: int = 4
    backoff: float = 0.25
    max_delay: float = 30.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, attempt: int, error: MemwardenError) -> float | None:
        """Seconds to wait before try ``attempt + 1`` (0-based ``attempt``), or None: give up."""
        if attempt + 1 >= self.attempts or error.status not in self.statuses | {0}:
            return None
        if error.retry_after is not None:
            return min(self.max_delay, error.retry_after)
        return min(self.max_delay, self.backoff * 2.0**attempt)


NO_RETRY = Retry(attempts=1)


def prepare(request: Request[Any]) -> Prepared:
    values = msgspec.to_builtins(request)
    assert isinstance(values, dict)
    path = request.path
    for name in request.path_params:
        path = path.replace("{" + name + "}", quote(str(values.pop(name)), safe="/"))
    if request.method == "GET":
        params = tuple(
            (name, str(item).lower() if isinstance(item, bool) else str(item))
            for name, value in values.items()
            for item in (value if isinstance(value, list) else [value])
            if item is not None
        )
        return Prepared("GET", path, params, None)
    body: Any = values.get(request.body_field) if request.body_field else {**values, **request.fixed}
    return Prepared(request.method, path, (), msgspec.json.encode(body))


def retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number, or an HTTP date."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def interpret(request: Request[R], status: int, content: bytes, retry_after_header: str | None) -> R:
    """The answer as the request's result type, or raise its error's exception."""
    if status >= 400:
        raise _error(status, content, retry_after(retry_after_header))
    if request.text:
        text: R = content.decode("utf-8", "replace")  # type: ignore[assignment]
        return text
    if isinstance(request, PagedRequest) and request.items == "items":
        content = _as_list_page(content)
    result: R = msgspec.json.decode(content, type=request.result)
    return result


def _as_list_page(content: bytes) -> bytes:
    """A list's answer as ``{items, cursor}``. A server from before API.md's "Lists" answered
    a bare array, or ``{<items>, next_cursor}``; both read as the same page."""
    decoded = msgspec.json.decode(content)
    if isinstance(decoded, list):
        return msgspec.json.encode({"items": decoded, "cursor": None})
    if isinstance(decoded, dict) and "items" not in decoded:
        lists = [v for v in decoded.values() if isinstance(v, list)]
        if len(lists) == 1:
            return msgspec.json.encode({"items": lists[0], "cursor": decoded.get("next_cursor")})
    return content


def _error(status: int, content: bytes, wait: float | None) -> MemwardenError:
    try:
        body = msgspec.json.decode(content)
    except msgspec.DecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return error_for(body["error"], str(body.get("detail", "")), status, wait)
    code = "unavailable" if status >= 500 else "invalid_request"
    return error_for(code, f"HTTP {status}", status, wait)


def unreachable(error: Exception) -> Unavailable:
    """A connection that could not be made: retried like a 503 (status 0: no answer)."""
    return Unavailable(f"cannot reach the API ({type(error).__name__})", 0)
