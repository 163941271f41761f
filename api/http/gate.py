"""The gate in front of every syscall, in order: identity from the key (the
authentication middleware) -> role -> effective policy -> tenant gate -> rate limit ->
the request itself (no identity in body or query, no unknown fields, no text PostgreSQL
cannot store, no JSON nested deeper than ``MAX_JSON_DEPTH``) -> the syscall -> exactly
one audit record.

What to check comes from the route's ``Syscall`` (api/http/routing.py); the body is
decoded once, here (api/http/body.py), into the struct the handler's ``data`` parameter
names, and that struct is what the handler receives (``Call.body``).

Every decision here fails closed: an error while evaluating identity, scope or policy
is an error response, never a permit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

import anyio
import anyio.to_thread
import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Scope

from memwarden.api.http.body import IDENTITY_FIELDS, decode_body, urlencoded_utf8
from memwarden.api.http.errors import RateLimited, Unauthenticated, audit_outcome, classify
from memwarden.api.http.limits import HEAD
from memwarden.api.http.routing import Syscall, body_type, syscall_of
from memwarden.api.http.state import STATE_KEY, ApiState
from memwarden.domain.ledger.database import unavailable
from memwarden.domain.model.errors import (
    DomainError,
    Forbidden,
    IdentityInBody,
    InvalidRequest,
    NotFound,
    TooLarge,
)
from memwarden.domain.model.events import AuditOutcome
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import EffectivePolicy, check_not_suspended
from memwarden.domain.model.text import escape_unprintable, quote_text, storable_text_problem
from memwarden.domain.services.commands import SPOOLED, Note
from memwarden.domain.services.governance import GovernanceService
from memwarden.projections.search.stages import stage

T = TypeVar("T")


class Principal(msgspec.Struct, frozen=True):
    identity: Identity
    key_id: str


class Call:
    """One syscall in flight: who, which op, and whether its audit record exists yet."""

    __slots__ = ("audited", "body", "identity", "key_id", "last_write", "op", "policy")

    def __init__(self, principal: Principal, op: str) -> None:
        self.identity = principal.identity
        self.key_id = principal.key_id
        self.op = op
        self.audited = False
        self.body: msgspec.Struct | None = None
        """The request body, decoded once by the gate into the struct the handler takes."""
        self.policy: EffectivePolicy | None = None
        self.last_write: int | None = None
        """The key's last write position: what its reads wait for (read-your-writes)."""


def api_state(request: ASGIConnection[Any, Any, Any, Any]) -> ApiState:
    state: ApiState = request.app.state[STATE_KEY]
    return state


# -- identity ---------------------------------------------------------------------------------


class KeyAuthentication(AbstractAuthenticationMiddleware):
    """Identity comes from ``Authorization: Bearer mw_…`` and nothing else."""

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        state = api_state(connection)
        governance: GovernanceService = state.governance
        header = connection.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        presented = presented.strip()
        attempt = state.auth_throttle.attempt(
            connection.client.host if connection.client else None,
            presented if scheme.lower() == "bearer" else "",
        )
        parsed = attempt.parsed
        throttled_for = attempt.retry_after()
        if throttled_for:
            state.metrics.count("auth_throttled")
            raise RateLimited(
                "too many failed authentications from here; wait before trying again", throttled_for
            )
        if parsed is not None:
            key_id, secret = parsed
            cached = governance.cached_key(key_id)
            if cached is not None:
                key = cached if governance.check_cached(cached, secret) else None
            else:
                key = await anyio.to_thread.run_sync(governance.authenticate, presented)
            if key is not None:
                return AuthenticationResult(user=Principal(key.identity, key.key_id), auth=key.key_id)
        if header:  # a missing key is a mistake, not a guess: it spends no budget
            attempt.failed()
        reason = "no API key" if not header else "unknown, malformed or revoked API key"
        op = _op_of(connection)
        detail = f"unauthenticated: {reason}" + (f" (key {parsed[0]})" if parsed else "")
        if state.anonymous_audits.take("anonymous", state.anonymous_audits_per_minute) == 0.0:
            await anyio.to_thread.run_sync(governance.record_unauthenticated, op, detail)
        else:
            state.metrics.count("unaudited_unauthenticated")
        raise Unauthenticated(f"a valid API key is required ({reason})")


def _op_of(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The op an unauthenticated request is audited under; a path is the caller's text."""
    try:
        call = syscall_of(connection.route_handler)
    except (AttributeError, KeyError):
        call = None
    return call.name if call is not None else escape_unprintable(connection.url.path[:100])


# -- the gate ---------------------------------------------------------------------------------


async def gate(request: Request[Any, Any, Any]) -> None:
    """The ``before_request`` hook: everything up to the syscall itself."""
    handler = request.route_handler
    syscall = syscall_of(handler)
    if syscall is None or not isinstance(handler, HTTPRouteHandler):
        return
    principal = request.user
    if not isinstance(principal, Principal):  # the middleware guarantees it; fail closed anyway
        raise Unauthenticated("a valid API key is required")
    call = Call(principal, syscall.name)
    request.state.call = call
    raw: bytes | None = b""
    too_large: HTTPException | None = None
    try:
        raw = await request.body() if request.method in {"POST", "PUT", "PATCH"} else b""
    except HTTPException as error:
        if error.status_code != 413:
            raise
        raw, too_large = None, error
    query = list(request.query_params.multi_items())
    raw_query: bytes = request.scope.get("query_string", b"")
    state = api_state(request)
    governance = state.governance
    try:
        policy = governance.cached_policy(call.identity.namespace)
        if policy is None:
            policy = await anyio.to_thread.run_sync(governance.effective_policy, call.identity.namespace)
        _check_access(call, syscall, policy)
        wait, call.last_write = await state.callers.admit(call.key_id, policy.rate_limit_per_minute)
        seen = _Request(raw, query, raw_query, too_large, body_type(handler))
        if raw is not None and len(raw) > DECODE_ON_LOOP_BYTES:  # pure, but its cost grows with the body
            await anyio.to_thread.run_sync(_check_request, state, call, syscall, seen, policy, wait)
        else:
            _check_request(state, call, syscall, seen, policy, wait)  # pure: no I/O
        if call.last_write == HEAD:  # unknown (the shared store is down): everything so far
            call.last_write = await anyio.to_thread.run_sync(state.runtime.ledger.head_position)
    except DomainError as error:
        outcome, detail = audit_outcome(error), f"{error.code}: {error.detail}"
        await anyio.to_thread.run_sync(lambda: audit(state, call, outcome, detail))
        raise


DECODE_ON_LOOP_BYTES = 64 * 1024
"""Bodies up to this size are checked and decoded on the event loop (faster than a thread hop);
larger ones in a worker thread, so one caller's large body never holds every other request."""


@dataclass(frozen=True, slots=True)
class _Request:
    """What the gate read of the request before checking it."""

    raw: bytes | None
    """The body; None: larger than the server takes (``too_large`` says so)."""
    query: list[tuple[str, str]]
    raw_query: bytes
    too_large: HTTPException | None
    body: type[msgspec.Struct] | None
    """The struct the handler takes (None: the route takes no body)."""


def _check_access(call: Call, syscall: Syscall, policy: EffectivePolicy) -> None:
    """Role, then the tenant gate: refused before a token is taken."""
    if call.identity.role not in syscall.roles:
        raise Forbidden(f"role {call.identity.role!r} may not call {call.op}")
    call.policy = policy
    if syscall.tenant_gate:
        check_not_suspended(policy)


def _check_request(
    state: ApiState, call: Call, syscall: Syscall, request: _Request, policy: EffectivePolicy, wait: float
) -> None:
    """The rate limit's verdict, then the request itself (size, query, body)."""
    if wait > 0.0:
        raise RateLimited(
            f"more than {policy.rate_limit_per_minute} requests per minute", max(1, math.ceil(wait))
        )
    raw = request.raw
    if request.too_large is not None or (raw is not None and len(raw) > state.max_body_bytes):
        raise TooLarge(f"request body larger than {state.max_body_bytes} bytes")
    if not urlencoded_utf8(request.raw_query):
        raise InvalidRequest("the query string is not UTF-8 once percent-decoded")
    _check_query(request.query, syscall.query, syscall.allow)
    if request.body is not None:
        call.body = decode_body(raw or b"", request.body, syscall)
    elif raw and raw.strip() not in {b"", b"{}"}:
        raise InvalidRequest("this route takes no body")


def _check_query(
    params: Iterable[tuple[str, str]], expected: frozenset[str], allowed: frozenset[str]
) -> None:
    for name, value in params:
        problem = storable_text_problem(name)
        if problem is not None:
            raise InvalidRequest(f"a query parameter's name {problem}")
        if name in IDENTITY_FIELDS and name not in allowed:
            raise IdentityInBody(f"identity comes from the API key; the query names {name!r}")
        if name not in expected:
            raise InvalidRequest(f"unknown query parameter {quote_text(name, 50)}")
        problem = storable_text_problem(value)
        if problem is not None:
            raise InvalidRequest(f"query parameter {name} {problem}")


# -- running the syscall and auditing it ------------------------------------------------------------


def audit(
    state: ApiState, call: Call, outcome: AuditOutcome, detail: str, subject_id: UUID | None = None
) -> int:
    position: int = state.governance.record_audit(call.identity, call.op, outcome, detail, subject_id)
    call.audited = True
    if position != SPOOLED:  # a spooled one is counted by the spool (``audit_spool_records``)
        state.metrics.count(f"audit_{outcome}")
    return position


def current_call(request: Request[Any, Any, Any]) -> Call:
    call = getattr(request.state, "call", None)
    if not isinstance(call, Call):
        raise InvalidRequest("no syscall context")  # a route without the gate: fail closed
    return call


def command(request: Request[Any, Any, Any], run: Callable[[Call], T]) -> T:
    """A syscall whose service appends its own audit record (with the work, or alone
    when refused). Tracks the key's last write position for read-your-writes."""
    state, call = api_state(request), current_call(request)
    try:
        result = run(call)
    except DomainError:
        call.audited = True
        state.metrics.count("audit_denied")
        raise
    except Exception as error:
        _audit_failure(state, call, error)
        raise
    call.audited = True
    state.metrics.count("audit_ok")
    position = _position_of(result)
    if position:
        state.callers.note_write(call.key_id, position)
    return result


def query(
    request: Request[Any, Any, Any],
    run: Callable[[Call], T | None],
    detail: Callable[[T], str] = lambda _r: "",
    subject: UUID | None = None,
) -> T:
    """A syscall that only reads: its audit record is appended after the answer is known.
    A ``None`` answer is a miss (404, indistinguishable from a denial)."""
    state, call = api_state(request), current_call(request)
    try:
        result = run(call)
    except DomainError as error:
        _audit_read(state, call, audit_outcome(error), f"{error.code}: {error.detail}", subject)
        raise
    except Exception as error:
        _audit_failure(state, call, error, spool=True)
        raise
    if result is None:
        _audit_read(state, call, "miss", "not_found", subject)
        raise NotFound("no such memory")
    _audit_read(state, call, "ok", detail(result), subject)
    return result


def _audit_read(
    state: ApiState, call: Call, outcome: AuditOutcome, detail: str, subject: UUID | None
) -> None:
    """The record of a read, appended once its answer is known. A database that answers
    but takes no writes (read only, a full disk, a role without write rights) does not stop
    the reads it can still serve: their records wait in the audit spool and reach the ledger once it takes writes. A record that cannot even be spooled
    refuses the read (503): no answer goes out off the record."""
    with stage("audit append"):
        audit(state, call, outcome, detail, subject)


def _audit_failure(state: ApiState, call: Call, error: BaseException, *, spool: bool = False) -> None:
    """Record a failed call. When the failure is the database's, the record is not tried on
    it (it would wait for the same database, a connection timeout per request, and fail):
    with ``spool`` it goes to the audit spool at once; without, the service that failed has
    spooled its own record already."""
    if unavailable(error):
        call.audited = True  # settled: the fallback hook does not try (and count) again
        if not spool or not isinstance(error, Exception):
            return
        _status, code, detail, _ = classify(error)
        try:
            state.governance.runner.keep(call.identity, call.op, Note(f"{code}: {detail}", "error"), error)
        except Exception:  # noqa: BLE001 - the original failure is what the caller must see
            state.metrics.count("audit_failed")
        return
    _status, code, detail, _ = classify(error)
    try:
        audit(state, call, audit_outcome(error), f"{code}: {detail}")
    except Exception:  # noqa: BLE001 - the original failure is what the caller must see
        call.audited = True  # settled, as above
        state.metrics.count("audit_failed")


def _audit_failure_spooled(state: ApiState, call: Call, error: BaseException) -> None:
    _audit_failure(state, call, error, spool=True)


def _position_of(result: Any) -> int | None:
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    position = getattr(result, "position", None)
    if isinstance(position, int):
        return position
    if isinstance(result, tuple):
        for item in result:
            found = _position_of(item)
            if found:
                return found
    return None


AUDIT_FALLBACK_SECONDS = 2.0
"""The longest a failed request's answer waits for its fallback audit record."""


async def audit_unaudited(error: Exception, scope: Scope) -> None:
    """The app's ``after_exception`` hook: the fallback audit of a failure outside the gate
    and the runners (one record per call). It runs in a thread, never on the event loop,
    and the answer does not wait for it longer than ``AUDIT_FALLBACK_SECONDS`` (the thread
    finishes on its own, bounded by the database's connection timeout)."""
    connection: ASGIConnection[Any, Any, Any, Any] = ASGIConnection(scope)
    call = getattr(connection.state, "call", None)
    if not isinstance(call, Call) or call.audited:
        return
    state = api_state(connection)
    with anyio.move_on_after(AUDIT_FALLBACK_SECONDS):
        await anyio.to_thread.run_sync(_audit_failure_spooled, state, call, error, abandon_on_cancel=True)
