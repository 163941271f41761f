"""The console's routes. Thin: each reads the session, calls the API in process
(api/console/bridge.py) and renders the answer; the API's gate decides and audits."""

from __future__ import annotations

import json
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import anyio.to_thread
import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath
from litestar.response import Redirect, Template

from memwarden.api.console.bridge import ApiRefused, call_api
from memwarden.api.console.diff import diff_memories
from memwarden.api.console.queues import MEMORY_COLUMNS, QUEUES, Action, ReviewQueue, grouped
from memwarden.api.console.session import (
    CONSOLE_ROLES,
    CsrfRefused,
    NoSession,
    SessionStore,
    check_csrf,
    cleared_cookie,
    csrf_token,
    session_cookie,
    session_id,
    session_key,
)
from memwarden.api.http.body import urlencoded_utf8
from memwarden.api.http.gate import api_state
from memwarden.api.http.routes.erasure import FORGET_ROLES
from memwarden.domain.model.identity import COMPLIANCE_ROLES, OWNER_ROLES, REVIEWER_ROLES
from memwarden.domain.model.keys import parse_key
from memwarden.domain.model.text import escape_unprintable
from memwarden_client.proofs import ProofError, VerifierKey
from memwarden_client.records import verify_bound_proof_file

Req = Request[Any, Any, Any]
HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
CSS = (HERE / "console.css").read_bytes()
HISTORY_COLUMNS = (
    "id",
    "content",
    "status",
    "trust_tier",
    "recorded_at",
    "retired_at",
    "valid_from",
    "valid_to",
    "superseded_by",
    "kind",
    "reason",
)
AUDIT_FILTERS = ("since", "until", "actor", "op", "outcome", "order", "cursor")
SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # no-referrer would make browsers send Origin: null
    "cache-control": "no-store",
}


SIGNED_IN_ROLE: ContextVar[str | None] = ContextVar("console_role", default=None)
"""The role of the key this request's session signed in with (set by ``_signed_in``)."""
NAV_ROLES: dict[str, frozenset[str]] = {
    "compliance": COMPLIANCE_ROLES,
    "erase": FORGET_ROLES,
    "review": REVIEWER_ROLES,
    "owner": OWNER_ROLES,
}
"""Which roles each group of navigation links is offered to: the same role sets the API's
routes check, so a role is never shown a page that would answer "forbidden"."""


def nav_for(role: str | None) -> dict[str, bool]:
    """The navigation groups a role may use (none when the role is unknown)."""
    return {group: role is not None and role in roles for group, roles in NAV_ROLES.items()}


def page(name: str, key: str | None, http_status: int = 200, **context: Any) -> Template:
    """A rendered page with the console's security headers; ``key`` is the session's."""
    context["csrf"] = csrf_token(key) if key else ""
    context["signed_in"] = key is not None
    context["nav"] = nav_for(SIGNED_IN_ROLE.get() if key else None)
    context["queues"] = list(QUEUES.values())
    return Template(template_name=name, context=context, status_code=http_status, headers=SECURITY_HEADERS)


QUEUE_FILTERS = ("order", "cursor", "namespace", "writer", "rule", "since", "until", "group")
"""What a review queue page passes on to its list route."""


def filled(form: Any, names: tuple[str, ...]) -> dict[str, str]:
    """The named form (or query) fields that are not blank."""
    return {name: str(form.get(name)).strip() for name in names if str(form.get(name) or "").strip()}


def check_origin(request: Req) -> None:
    """A POST that a browser says comes from another site is refused (the login form has no
    session token yet: this is what stops another site signing a browser in with its key)."""
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host", ""):
        raise CsrfRefused


class BadForm(Exception):
    """A form whose percent-encoded bytes are not UTF-8 (the decoder would replace them)."""


async def read_form(request: Req) -> Any:
    """The form, once its raw fields are known to be UTF-8 (a lone surrogate or a stray byte
    is refused here, not turned into U+FFFD and passed on)."""
    if not urlencoded_utf8(await request.body()):
        raise BadForm
    return await request.form()


def _remember_cached_role(request: Req, key: str | None) -> None:
    """The role of a key the gate has just checked (an error page's links, without I/O)."""
    parsed = parse_key(key) if key else None
    cached = api_state(request).governance.cached_key(parsed[0]) if parsed else None
    SIGNED_IN_ROLE.set(cached.role if cached is not None else None)


async def _signed_in(request: Req) -> str:
    """The session's key, its role remembered for this request's navigation (a revoked key
    gets no links; the API's gate refuses its calls anyway)."""
    key = session_key(request, _sessions(request))
    governance = api_state(request).governance
    found = await anyio.to_thread.run_sync(governance.authenticate, key)
    SIGNED_IN_ROLE.set(found.role if found is not None else None)
    return key


async def posted(request: Req) -> tuple[str, Any]:
    """The session key and form of a console POST, after its origin and CSRF checks."""
    check_origin(request)
    key = await _signed_in(request)
    form = await read_form(request)
    check_csrf(key, form.get("csrf"))
    return key, form


def forget_body(asked: dict[str, str]) -> dict[str, Any]:
    """The ``forget`` body of the erasure form: the API validates every value."""
    by, what = asked["by"], asked["what"]
    if by == "ids":
        try:
            ids = [str(UUID(line.strip())) for line in what.splitlines() if line.strip()]
        except ValueError:
            raise ApiRefused(400, "invalid_request", "each line must be a memory id") from None
        return {"ids": ids, "reason": asked["reason"]}
    if by in {"subject", "subtree"}:
        return {by: what, "reason": asked["reason"]}
    raise ApiRefused(400, "invalid_request", "erase by ids, subject or subtree")


MAX_SELECTED = 500
"""A bulk decision's items at most: one queue page."""


def _action(found: ReviewQueue, form: Any) -> Action:
    action = found.action(str(form.get("decision") or ""))
    if action is None:
        raise ApiRefused(400, "invalid_request", f"the {found.name} queue has no such action")
    return action


def _body(found: ReviewQueue, action: Action, form: Any) -> dict[str, str] | None:
    """The admin route's body: what the reviewer typed, and the optional reason."""
    typed = str(form.get(action.text) or "") if action.text else ""
    if action.text_required and not typed.strip():
        raise ApiRefused(400, "invalid_request", f"{action.name} needs the {action.text} field")
    body = action.body(typed)
    reason = str(form.get("reason") or "").strip()
    if found.takes_reason and reason and body is not None and action.text != "reason":
        body["reason"] = reason
    return body


def _selected(form: Any) -> list[UUID]:
    ticked = [str(v) for v in form.getall("ids", [])]
    if not ticked:
        raise ApiRefused(400, "invalid_request", "no item is selected")
    if len(ticked) > MAX_SELECTED:
        raise ApiRefused(400, "invalid_request", f"more than {MAX_SELECTED} items selected")
    try:
        return list(dict.fromkeys(UUID(t) for t in ticked))
    except ValueError:
        raise ApiRefused(400, "invalid_request", "a selected item is not an id") from None


# -- failures, as pages ---------------------------------------------------------------------


def _to_login(_request: Req, _error: Exception) -> Response[Any]:
    return Redirect(path="/console/login", status_code=303)


def _csrf_refused(_request: Req, _error: Exception) -> Response[Any]:
    return page("error.html", None, 403, code="csrf", detail="the form's CSRF token is missing or wrong")


def _bad_form(_request: Req, _error: Exception) -> Response[Any]:
    return page("error.html", None, 400, code="invalid_request", detail="the form is not valid UTF-8")


def _api_refused(request: Req, error: Exception) -> Response[Any]:
    assert isinstance(error, ApiRefused)
    if error.status == 401:
        response = page("login.html", None, 401, error=f"{error.code}: {error.detail}")
        response.cookies.append(cleared_cookie())
        return response
    try:
        key: str | None = session_key(request, _sessions(request))
    except NoSession:
        key = None
    _remember_cached_role(request, key)
    return page(
        "error.html",
        key,
        error.status,
        code=error.code,
        detail=error.detail,
    )


def _http_error(_request: Req, error: Exception) -> Response[Any]:
    assert isinstance(error, HTTPException)
    status = error.status_code if 400 <= error.status_code < 500 else 400
    return page(
        "error.html", None, status, code="invalid_request", detail=escape_unprintable(str(error.detail)[:300])
    )


class ProofCheck(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    said: str
    note: str
    document: str


def checked_proof(answer: dict[str, Any]) -> ProofCheck:
    """The API's proof as a proof file (``memwarden proof verify`` reads it), checked with the
    client's verifier against the log key the answer names."""
    inclusion = answer["inclusion"]
    document = {
        "kind": "inclusion",
        **{k: inclusion[k] for k in ("position", "leaf_index", "size", "leaf_hash", "proof", "record")},
        "checkpoint": answer["checkpoint"],
        "log_key": answer["log_key"],
    }
    try:
        said = verify_bound_proof_file(document, VerifierKey.parse(answer["log_key"]))
        ok = True
    except ProofError as error:
        said, ok = escape_unprintable(str(error)), False
    return ProofCheck(ok=ok, said=said, note=answer["checkpoint"], document=json.dumps(document, indent=2))


def _sessions(request: Req) -> SessionStore:
    return api_state(request).console_sessions


def _queue(name: str) -> ReviewQueue:
    found = QUEUES.get(name)
    if found is None:
        raise ApiRefused(404, "not_found", "no such review queue")
    return found


class ConsoleController(Controller):
    path = "/console"
    include_in_schema = False
    exception_handlers = {  # noqa: RUF012 - Litestar's class attribute
        NoSession: _to_login,
        CsrfRefused: _csrf_refused,
        BadForm: _bad_form,
        ApiRefused: _api_refused,
        HTTPException: _http_error,
    }

    @get("/console.css", media_type="text/css")
    async def css(self) -> Response[bytes]:
        return Response(CSS, media_type="text/css", headers={"cache-control": "max-age=300"})

    # -- session ---------------------------------------------------------------------------

    @get("/")
    async def home(self, request: Req) -> Response[Any]:
        await _signed_in(request)
        return Redirect(path="/console/audit", status_code=303)

    @get("/login")
    async def login_page(self) -> Template:
        return page("login.html", None)

    @post("/login")
    async def login(self, request: Req) -> Response[Any]:
        check_origin(request)
        form = await read_form(request)
        presented = str(form.get("key") or "").strip()
        state = api_state(request)
        attempt = state.auth_throttle.attempt(request.client.host if request.client else None, presented)
        wait = attempt.retry_after()
        if wait:
            throttled = page(
                "login.html", None, 429, error="too many failed logins from here; wait and try again"
            )
            throttled.headers["Retry-After"] = str(wait)
            return throttled
        found = (
            await anyio.to_thread.run_sync(state.governance.authenticate, presented)
            if attempt.parsed
            else None
        )
        if found is None:
            attempt.failed()
            return page("login.html", None, 401, error="unknown, malformed or revoked API key")
        if found.identity.role not in CONSOLE_ROLES:
            return page("login.html", None, 403, error=f"role {found.identity.role} may not use the console")
        response = Redirect(path="/console/audit", status_code=303)
        response.cookies.append(session_cookie(state.console_sessions.open(presented)))
        return response

    @post("/logout")
    async def logout(self, request: Req) -> Response[Any]:
        await posted(request)
        _sessions(request).close(session_id(request))
        response = Redirect(path="/console/login", status_code=303)
        response.cookies.append(cleared_cookie())
        return response

    # -- audit -------------------------------------------------------------------------------

    @get("/audit")
    async def audit(self, request: Req) -> Template:
        key = await _signed_in(request)
        filters = {"order": "newest", **filled(request.query_params, AUDIT_FILTERS)}  # newest first
        answer = await call_api(request, key, "GET", "/v1/compliance/audit", params=filters)
        return page("audit.html", key, filters=filters, records=answer["items"], next_cursor=answer["cursor"])

    # -- as of --------------------------------------------------------------------------------

    @get("/asof")
    async def asof(self, request: Req) -> Template:
        key = await _signed_in(request)
        asked = filled(request.query_params, ("as_of", "valid_at", "target", "query", "compare_as_of"))
        if "as_of" not in asked:
            return page("asof.html", key, asked=asked, answer=None, changes=None)
        body = {name: asked[name] for name in ("as_of", "valid_at", "target", "query") if name in asked}
        answer = await call_api(request, key, "POST", "/v1/compliance/asof", body=body)
        changes = None
        if "compare_as_of" in asked:
            other = await call_api(
                request, key, "POST", "/v1/compliance/asof", body={**body, "as_of": asked["compare_as_of"]}
            )
            changes = diff_memories(answer["memories"], other["memories"])
        return page("asof.html", key, asked=asked, answer=answer, changes=changes)

    @get("/memory/{memory_id:uuid}")
    async def memory(self, request: Req, memory_id: FromPath[UUID]) -> Template:
        key = await _signed_in(request)
        answer = await call_api(request, key, "POST", "/v1/mem/history", body={"id": str(memory_id)})
        return page(
            "history.html",
            key,
            memory_id=str(memory_id),
            versions=answer["versions"],
            columns=HISTORY_COLUMNS,
        )

    # -- review queues -------------------------------------------------------------------------

    @get("/review/{queue:str}")
    async def review(self, request: Req, queue: FromPath[str]) -> Template:
        key = await _signed_in(request)
        found = _queue(queue)
        status = str(request.query_params.get("status") or found.actionable)
        asked = {"status": status, **filled(request.query_params, QUEUE_FILTERS)}
        answer = await call_api(request, key, "GET", found.list_path, params=asked)
        return page(
            "review.html",
            key,
            queue=found,
            items=answer["items"],
            groups=grouped(found, answer["items"]),
            count=answer["count"],
            next_cursor=answer["cursor"],
            asked=asked,
            statements=answer["statements"],
            status=status,
            memory_columns=MEMORY_COLUMNS,
        )

    @post("/review/{queue:str}/bulk")
    async def decide_selected(self, request: Req, queue: FromPath[str]) -> Response[Any]:
        """One decision over the ticked items, each through its own admin route (so each is
        gated, decided and audited on its own); the first refusal stops the rest and says
        how many were done."""
        key, form = await posted(request)
        found = _queue(queue)
        action = _action(found, form)
        if action.text_required:
            raise ApiRefused(400, "invalid_request", f"{action.name} needs text for each item: one at a time")
        selected = _selected(form)
        for done, item_id in enumerate(selected):
            try:
                await call_api(
                    request, key, "POST", action.path.format(id=item_id), body=_body(found, action, form)
                )
            except ApiRefused as refused:
                detail = f"{done} of {len(selected)} done; then {refused.detail}"
                raise ApiRefused(refused.status, refused.code, detail) from None
        return Redirect(path=f"/console/review/{found.name}", status_code=303)

    @post("/review/{queue:str}/{item_id:uuid}")
    async def decide(self, request: Req, queue: FromPath[str], item_id: FromPath[UUID]) -> Response[Any]:
        """One click on a queue item: its action's admin route, called with the session's key."""
        key, form = await posted(request)
        found = _queue(queue)
        action = _action(found, form)
        await call_api(request, key, "POST", action.path.format(id=item_id), body=_body(found, action, form))
        return Redirect(path=f"/console/review/{found.name}", status_code=303)

    # -- keys and policies ---------------------------------------------------------------------

    @get("/keys")
    async def keys(self, request: Req) -> Template:
        key = await _signed_in(request)
        listed = await call_api(request, key, "GET", "/v1/admin/keys", params={"limit": "500"})
        return page("keys.html", key, keys=listed["items"], issued=None)

    @post("/keys")
    async def create_key(self, request: Req) -> Template:
        key, form = await posted(request)
        body = {name: str(form.get(name) or "") for name in ("target", "actor", "role")}
        issued = await call_api(request, key, "POST", "/v1/admin/keys", body=body)
        listed = await call_api(request, key, "GET", "/v1/admin/keys", params={"limit": "500"})
        return page("keys.html", key, keys=listed["items"], issued=issued)

    @post("/keys/revoke")
    async def revoke_key(self, request: Req) -> Response[Any]:
        key, form = await posted(request)
        await call_api(
            request, key, "POST", "/v1/admin/keys/revoke", body={"key_id": str(form.get("key_id") or "")}
        )
        return Redirect(path="/console/keys", status_code=303)

    @get("/policies")
    async def policies(self, request: Req) -> Template:
        key = await _signed_in(request)
        namespace = str(request.query_params.get("namespace") or "").strip().lstrip("/")
        policy = None
        if namespace:
            policy = await call_api(request, key, "GET", f"/v1/admin/policies/{namespace}")
        return page("policies.html", key, namespace=namespace, policy=policy)

    @post("/policies")
    async def put_policy(self, request: Req) -> Template:
        key, form = await posted(request)
        namespace = str(form.get("namespace") or "").strip().lstrip("/")
        if not namespace:
            raise ApiRefused(400, "invalid_request", "a namespace is required")
        raw = str(form.get("policy") or "").encode("utf-8", "surrogatepass")
        policy = await call_api(request, key, "PUT", f"/v1/admin/policies/{namespace}", raw=raw)
        return page("policies.html", key, namespace=namespace, policy=policy, saved=True)

    # -- operations ----------------------------------------------------------------------------

    @get("/projections")
    async def projections(self, request: Req) -> Template:
        key = await _signed_in(request)
        status = await call_api(request, key, "GET", "/v1/ops/projections")
        return page("projections.html", key, status=status, report=None)

    @post("/projections/{name:str}/rebuild")
    async def rebuild(self, request: Req, name: FromPath[str]) -> Template:
        key, _form = await posted(request)
        report = await call_api(
            request, key, "POST", f"/v1/ops/projections/{name}/rebuild", body={"verify": True}
        )
        status = await call_api(request, key, "GET", "/v1/ops/projections")
        return page("projections.html", key, status=status, report=report)

    @get("/ledger")
    async def ledger(self, request: Req) -> Template:
        return page("ledger.html", await _signed_in(request), verified=None, checkpoint=None)

    @post("/ledger/verify")
    async def verify_ledger(self, request: Req) -> Template:
        key, form = await posted(request)
        pasted = str(form.get("checkpoint") or "").strip()
        raw = f'{{"checkpoint": {pasted}}}'.encode("utf-8", "surrogatepass") if pasted else b"{}"
        verified = await call_api(request, key, "POST", "/v1/compliance/ledger/verify", raw=raw)
        return page("ledger.html", key, verified=verified, checkpoint=None)

    @post("/ledger/checkpoint")
    async def checkpoint(self, request: Req) -> Template:
        key, _form = await posted(request)
        made = await call_api(request, key, "POST", "/v1/compliance/ledger/checkpoint")
        return page("ledger.html", key, verified=None, checkpoint=made)

    @get("/checkpoints")
    async def checkpoints(self, request: Req) -> Template:
        key = await _signed_in(request)
        asked = filled(request.query_params, ("cursor",))
        answer = await call_api(request, key, "GET", "/v1/compliance/checkpoints", params=asked)
        return page("checkpoints.html", key, checkpoints=answer["items"], next_cursor=answer["cursor"])

    @get("/prove")
    async def prove(self, request: Req) -> Template:
        """A record proven in one click: the API's proof, checked here with the client alone."""
        key = await _signed_in(request)
        asked = filled(request.query_params, ("position", "size"))
        if "position" not in asked:
            return page("prove.html", key, position=None, size=None, result=None)
        if not all(v.isdigit() and len(v) <= 18 for v in asked.values()):
            raise ApiRefused(400, "invalid_request", "position and size are whole numbers")
        body = {name: int(value) for name, value in asked.items()}
        answer = await call_api(request, key, "POST", "/v1/mem/prove", body=body)
        return page(
            "prove.html", key, position=body["position"], size=body.get("size"), result=checked_proof(answer)
        )

    @get("/erase")
    async def erase_form(self, request: Req) -> Template:
        key = await _signed_in(request)
        return page("erase.html", key, asked={"by": "ids"}, erased=None)

    @post("/erase")
    async def erase(self, request: Req) -> Template:
        """Erase by ids, subject or subtree through the ``forget`` syscall, then show the
        certificate with the ledger's own verdict on it and a link to prove its record."""
        key, form = await posted(request)
        asked = {name: str(form.get(name) or "").strip() for name in ("by", "what", "reason")}
        forgotten = await call_api(request, key, "POST", "/v1/mem/forget", body=forget_body(asked))
        certificate = json.dumps(forgotten["certificate"], indent=2, ensure_ascii=False)
        check = await call_api(
            request, key, "POST", "/v1/compliance/certificates/verify", body=forgotten["certificate"]
        )
        return page(
            "erase.html",
            key,
            asked=asked,
            erased=forgotten["erased"],
            certificate=certificate,
            check=check,
            position=forgotten["position"],
        )

    @get("/certificates")
    async def certificates(self, request: Req) -> Template:
        return page("certificates.html", await _signed_in(request), check=None, pasted="")

    @post("/certificates")
    async def verify_certificate(self, request: Req) -> Template:
        key, form = await posted(request)
        pasted = str(form.get("certificate") or "")
        check = await call_api(
            request,
            key,
            "POST",
            "/v1/compliance/certificates/verify",
            raw=pasted.encode("utf-8", "surrogatepass"),
        )
        return page("certificates.html", key, check=check, pasted=pasted)
