"""The gate in front of every syscall, in order: identity from the key (the
authentication middleware) -> role -> effective policy -> tenant gate -> rate limit ->
the request itself (no identity in body or query, no unknown fields, no text PostgreSQL
cannot store, no JSON nested deeper than ``MAX_JSON_DEPTH``) -> the syscall -> exactly
one audit record.

Every decision here fails closed: an error while evaluating identity, scope or policy
is an error response, never a permit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar
from uuid import UUID

import anyio
import anyio.to_thread
import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult
from litestar.types import Scope

from api.http.errors import RateLimited, Unauthenticated, audit_outcome, classify
from api.http.limits import HEAD
from api.http.schemas import Body
from api.http.state import STATE_KEY, ApiState
from domain.ledger.database import unavailable
from domain.model.errors import DomainError, Forbidden, IdentityInBody, InvalidRequest, NotFound, TooLarge
from domain.model.identity import Identity
from domain.model.keys import parse_key
from domain.model.policies import EffectivePolicy, check_not_suspended
from domain.model.storable import check_storable, unstorable_field
from domain.model.text import escape_unprintable, quote_text, storable_text_problem
from domain.services.governance import GovernanceService

T = TypeVar("T")
Outcome = Literal["ok", "denied", "miss", "error"]
IDENTITY_FIELDS = frozenset({"namespace", "actor", "role", "tenant", "agent_id"})
ALL_ROLES = frozenset({"agent", "member", "auditor", "admin", "owner"})
MAX_JSON_DEPTH = 32
"""No body needs more nesting; a deeper one is refused before it is decoded."""
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(rb"[\[\]{}]")


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
        self.body: Any = None
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
        parsed = parse_key(presented) if scheme.lower() == "bearer" else None
        if parsed is not None:
            key_id, secret = parsed
            cached = governance.cached_key(key_id)
            if cached is not None:
                key = cached if governance.check_cached(cached, secret) else None
            else:
                key = await anyio.to_thread.run_sync(governance.authenticate, presented)
            if key is not None:
                return AuthenticationResult(user=Principal(key.identity, key.key_id), auth=key.key_id)
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
        return str(connection.route_handler.opt.get("op") or escape_unprintable(connection.url.path[:100]))
    except (AttributeError, KeyError):
        return escape_unprintable(connection.url.path[:100])


# -- the gate ---------------------------------------------------------------------------------


async def gate(request: Request[Any, Any, Any]) -> None:
    """The ``before_request`` hook: everything up to the syscall itself."""
    opt = request.route_handler.opt
    op: str | None = opt.get("op")
    if op is None:
        return
    principal = request.user
    if not isinstance(principal, Principal):  # the middleware guarantees it; fail closed anyway
        raise Unauthenticated("a valid API key is required")
    call = Call(principal, op)
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
    state = api_state(request)
    governance = state.governance
    try:
        policy = governance.cached_policy(call.identity.namespace)
        if policy is None:
            policy = await anyio.to_thread.run_sync(governance.effective_policy, call.identity.namespace)
        _check_access(call, opt, policy)
        wait, call.last_write = await state.callers.admit(call.key_id, policy.rate_limit_per_minute)
        _check_request(state, call, opt, raw, query, too_large, policy, wait)  # pure: no I/O
        if call.last_write == HEAD:  # unknown (the shared store is down): everything so far
            call.last_write = await anyio.to_thread.run_sync(state.runtime.ledger.head_position)
    except DomainError as error:
        outcome, detail = audit_outcome(error), f"{error.code}: {error.detail}"
        await anyio.to_thread.run_sync(lambda: audit(state, call, outcome, detail))
        raise


def _check_access(call: Call, opt: dict[str, Any], policy: EffectivePolicy) -> None:
    """Role, then the tenant gate: refused before a token is taken."""
    roles: frozenset[str] = opt.get("roles", ALL_ROLES)
    if call.identity.role not in roles:
        raise Forbidden(f"role {call.identity.role!r} may not call {call.op}")
    call.policy = policy
    if opt.get("tenant_gate", True):
        check_not_suspended(policy)


def _check_request(
    state: ApiState,
    call: Call,
    opt: dict[str, Any],
    raw: bytes | None,
    query: list[tuple[str, str]],
    too_large: HTTPException | None,
    policy: EffectivePolicy,
    wait: float,
) -> None:
    """The rate limit's verdict, then the request itself (size, query, body)."""
    if wait > 0.0:
        raise RateLimited(
            f"more than {policy.rate_limit_per_minute} requests per minute", max(1, math.ceil(wait))
        )
    if too_large is not None or (raw is not None and len(raw) > state.max_body_bytes):
        raise TooLarge(f"request body larger than {state.max_body_bytes} bytes")
    allowed: frozenset[str] = opt.get("allow", frozenset())
    _check_query(query, opt.get("query", frozenset()), allowed)
    body_type: type[Body] | None = opt.get("body")
    per_item: frozenset[str] = opt.get("per_item", frozenset())
    call.body = _decode(raw or b"", body_type, allowed, per_item) if body_type is not None else None
    if body_type is None and raw and raw.strip() not in {b"", b"{}"}:
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


def _identity_names(value: Any, allowed: frozenset[str]) -> str | None:
    """The first identity field named anywhere in the decoded body (``allowed`` ones only at
    the top level). Iterative: a deeply nested body cannot exhaust the stack."""
    pending: list[tuple[Any, bool]] = [(value, True)]
    while pending:
        item, top = pending.pop()
        if isinstance(item, dict):
            for key, member in item.items():
                if key in IDENTITY_FIELDS and not (top and key in allowed):
                    return str(key)
                pending.append((member, False))
        elif isinstance(item, list):
            pending.extend((member, False) for member in item)
    return None


def _nests_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether the JSON text opens more than ``limit`` arrays/objects inside each other
    (brackets inside strings do not count). Checked before decoding: the decoder recurses."""
    depth = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub(b"", raw)):
        depth += 1 if bracket in b"[{" else -1
        if depth > limit:
            return True
    return False


def _malformed(data: bytes, error: msgspec.DecodeError) -> str:
    """Why the body is not JSON. The decoder calls a lone surrogate escape (``"\\ud800"``)
    malformed; the standard library reads it, so its field can be named like any other."""
    try:
        lenient = json.loads(data)
    except (ValueError, RecursionError):
        lenient = None
    unstorable = unstorable_field(lenient) if lenient is not None else None
    return unstorable or escape_unprintable(f"malformed JSON: {error}"[:300])


def _decode(
    raw: bytes, body_type: type[Body], allowed: frozenset[str], per_item: frozenset[str] = frozenset()
) -> Any:
    """The body as ``body_type``, or InvalidRequest naming what is wrong. Messages never copy
    caller text raw: storable problems name the field, decoder messages are escaped.
    ``per_item``: top-level fields whose members the route reads one by one (a batch: an
    unstorable value rejects its item alone); identity is still refused anywhere."""
    data = raw if raw.strip() else b"{}"
    if _nests_deeper_than(data, MAX_JSON_DEPTH):
        raise InvalidRequest(f"the body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels")
    try:
        generic = msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise InvalidRequest(_malformed(data, error)) from error
    if not isinstance(generic, dict):
        raise InvalidRequest("the body must be a JSON object")
    check_storable({name: value for name, value in generic.items() if name not in per_item})
    named = _identity_names(generic, allowed)
    if named is not None:
        raise IdentityInBody(f"identity comes from the API key; the body names {named!r}")
    try:
        return msgspec.json.decode(data, type=body_type)
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise InvalidRequest(escape_unprintable(str(error)[:300])) from error


# -- running the syscall and auditing it ------------------------------------------------------------


def audit(state: ApiState, call: Call, outcome: Outcome, detail: str, subject_id: UUID | None = None) -> int:
    position: int = state.governance.record_audit(call.identity, call.op, outcome, detail, subject_id)
    call.audited = True
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
        _audit_failure(state, call, error)
        raise
    if result is None:
        _audit_read(state, call, "miss", "not_found", subject)
        raise NotFound("no such memory")
    _audit_read(state, call, "ok", detail(result), subject)
    return result


def _audit_read(state: ApiState, call: Call, outcome: Outcome, detail: str, subject: UUID | None) -> None:
    """The record of a read, appended once its answer is known. A database that answers
    but takes no writes (read only, a full disk, a role without write rights) does not stop
    the reads it can still serve: the record that could not be appended is counted
    (``audit_failed``, as in an outage) and the answer goes out."""
    try:
        audit(state, call, outcome, detail, subject)
    except Exception as error:
        if not unavailable(error):
            raise
        call.audited = True  # settled: the fallback hook does not try (and count) again
        state.metrics.count("audit_failed")


def _audit_failure(state: ApiState, call: Call, error: BaseException) -> None:
    """Record a failed call. Not when the failure is the database's: the record would wait
    for the same database (a connection timeout per request) and fail anyway."""
    if unavailable(error):
        call.audited = True  # settled: the fallback hook does not try (and count) again
        state.metrics.count("audit_failed")
        return
    _status, code, detail, _ = classify(error)
    try:
        audit(state, call, audit_outcome(error), f"{code}: {detail}")
    except Exception:  # noqa: BLE001 - the original failure is what the caller must see
        call.audited = True  # settled, as above
        state.metrics.count("audit_failed")


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
        await anyio.to_thread.run_sync(_audit_failure, state, call, error, abandon_on_cancel=True)
