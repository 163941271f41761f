"""The one place where failures become HTTP answers: ``{"error", "detail"}`` with the
status of API.md. Bad input is never a 500, nor is a database that is down (503
``unavailable``, with ``Retry-After``). A request that reached the gate and was not audited
yet is audited by the app's ``after_exception`` hook (``api.http.gate.audit_unaudited``)."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import (
    HTTPException,
    InternalServerException,
    NotAuthorizedException,
    ValidationException,
)

from memwarden.domain.ledger.database import unavailable
from memwarden.domain.model.errors import DomainError, NotFound
from memwarden.domain.model.events import AuditOutcome
from memwarden.domain.model.policies import TenantSuspended
from memwarden.domain.model.text import escape_unprintable
from memwarden.projections.runner import ProjectionLag

log = logging.getLogger(__name__)
RETRY_AFTER = 2
"""Seconds a client is asked to wait after a database failure (a restart of the embedded
server takes about that long)."""


class ErrorBody(msgspec.Struct, frozen=True):
    error: str
    detail: str


class Unauthenticated(DomainError):
    code = "unauthenticated"


class RateLimited(DomainError):
    code = "rate_limited"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class Unavailable(DomainError):
    code = "unavailable"


STATUS: dict[str, int] = {
    "invalid_request": 400,
    "identity_in_body": 400,
    "provenance_not_allowed": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "tenant_suspended": 403,
    "outside_subtree": 403,
    "not_found": 404,
    "not_valid_then": 404,
    "version_conflict": 409,
    "too_large": 413,
    "rate_limited": 429,
    "projection_lag": 503,
    "unavailable": 503,
}
_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "invalid_request",
    409: "version_conflict",
    413: "too_large",
    415: "invalid_request",
    429: "rate_limited",
}


CLIENT_CLOSED = 499
"""The status a request whose caller went away before it was read is counted under (nginx's):
nobody receives it, and it is neither the caller's mistake nor the server's fault."""


def client_closed(error: BaseException) -> bool:
    """Litestar's way of saying the caller disconnected while its body was being read."""
    return isinstance(error, InternalServerException) and "client disconnected" in str(error.detail)


def audit_outcome(error: BaseException) -> AuditOutcome:
    if client_closed(error):
        return "client_closed"
    if isinstance(error, NotFound):
        return "miss"
    if isinstance(error, DomainError) and not isinstance(error, Unavailable):
        return "denied"
    if isinstance(error, HTTPException) and error.status_code < 500:
        return "denied"
    return "error"


def classify(error: BaseException) -> tuple[int, str, str, dict[str, str]]:
    """(status, code, detail, headers) for any failure."""
    if isinstance(error, RateLimited):
        return 429, error.code, error.detail, {"Retry-After": str(error.retry_after)}
    if isinstance(error, TenantSuspended | DomainError):
        status = STATUS.get(error.code, 400)
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(error, Unauthenticated) else {}
        if status == 503:  # every 503 says when to come back
            headers["Retry-After"] = str(RETRY_AFTER)
        return status, error.code, error.detail, headers
    if isinstance(error, ProjectionLag):
        return 503, "projection_lag", str(error), {"Retry-After": str(max(1, error.retry_after))}
    if isinstance(error, NotAuthorizedException):
        return 401, "unauthenticated", "a valid API key is required", {"WWW-Authenticate": "Bearer"}
    if isinstance(error, ValidationException):
        return 400, "invalid_request", _validation_detail(error), {}
    if isinstance(error, HTTPException) and error.status_code < 500:
        code = _HTTP_CODES.get(error.status_code, "invalid_request")
        status = error.status_code if error.status_code in _HTTP_CODES else 400
        return status, code, str(error.detail), dict(error.headers or {})  # a 405's Allow
    if client_closed(error):
        return (
            CLIENT_CLOSED,
            "client_closed",
            "the client closed the connection before its request was read",
            {},
        )
    if unavailable(error):
        return 503, "unavailable", "the database is unavailable; retry", {"Retry-After": str(RETRY_AFTER)}
    if isinstance(error, TimeoutError):
        return 503, "unavailable", "timed out; retry", {"Retry-After": str(RETRY_AFTER)}
    return 500, "internal", "internal error (logged)", {}


def _validation_detail(error: ValidationException) -> str:
    """The decoder's first message, escaped: it may quote the caller's text (a field name)."""
    extra: Any = error.extra
    if isinstance(extra, list) and extra:
        first = extra[0]
        if isinstance(first, dict) and first.get("message"):
            message = str(first["message"])[:300]
            where = first.get("source") if first.get("source") in {"query", "path", "header"} else None
            named = f"{where} parameter {str(first.get('key'))[:64]}: " if where and first.get("key") else ""
            return escape_unprintable(named + message)
    return escape_unprintable(str(error.detail)[:300])


def error_response(error: BaseException) -> Response[ErrorBody]:
    status, code, detail, headers = classify(error)
    return Response(ErrorBody(code, detail), status_code=status, headers=headers)


def handle(request: Request[Any, Any, Any], error: Exception) -> Response[ErrorBody]:
    """The app's exception handler. It runs on the event loop, so it does no I/O: the
    fallback audit of a request nothing audited yet is the ``after_exception`` hook
    (``api.http.gate.audit_unaudited``), which runs before it, in a thread."""
    status, _code, _detail, _ = classify(error)
    if status == 500:  # a bug: a 503 (the database, a lag, a timeout) is no news for the log
        log.exception("request failed: %s %s", request.method, request.url.path, exc_info=error)
    return error_response(error)
