"""Compliance routes (auditor, admin, owner): the ledger proofs, its checkpoints and the audit
trail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec
from litestar import Controller, Request
from litestar.params import JSONBody

from memwarden.api.http.gate import Call, api_state, query
from memwarden.api.http.routing import Syscall, syscall_get, syscall_post
from memwarden.api.http.schemas import (
    AuditResponse,
    ComplianceTime,
    Head,
    VerifyLedgerBody,
    VerifyLedgerResponse,
    compliance_time,
)
from memwarden.api.http.trees import checkpoint_now, tree_of
from memwarden.domain.ledger.chain import ChainReport
from memwarden.domain.ledger.checkpoints import Checkpoint, InvalidCheckpoint
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.identity import COMPLIANCE_ROLES
from memwarden.domain.model.text import quote_text
from memwarden.projections.governance.views import AuditFilter

Req = Request[Any, Any, Any]
MAX_PAGE_LIMIT = 1000


def compliance(op: str, **options: Any) -> Syscall:
    """A compliance syscall: auditors, admins and owners, suspended tenants included."""
    return Syscall(name=op, roles=COMPLIANCE_ROLES, tenant_gate=False, **options)


class AuditQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    since: ComplianceTime | None = None
    until: ComplianceTime | None = None
    actor: str | None = None
    op: str | None = None
    outcome: str | None = None
    limit: int = 100
    cursor: str | None = None
    order: Literal["oldest", "newest"] = "oldest"


class CheckpointsQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    limit: int = 100
    cursor: str | None = None


Paged = TypeVar("Paged", AuditQuery, CheckpointsQuery)


def paged_query(params: dict[str, str], shape: type[Paged]) -> Paged:
    """The query string of a paged route, its ``limit`` within bounds, or InvalidRequest."""
    try:
        asked = msgspec.convert(params, shape, strict=False)
    except msgspec.ValidationError as error:
        raise InvalidRequest(str(error)) from error
    if not 1 <= asked.limit <= MAX_PAGE_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE_LIMIT}")
    return asked


class CheckpointsResponse(msgspec.Struct, frozen=True, kw_only=True):
    checkpoints: list[Checkpoint]
    """Newest first."""
    next_cursor: str | None


def audit_cursor(cursor: str | None, head: Callable[[], int]) -> tuple[int, int]:
    """(bound, upto) of an audit walk: a first page snapshots the ledger head, and its
    cursors (``bound:upto``; the bound is the last position shown, read after it oldest
    first and before it newest first) carry that snapshot, so a walk ends even though every page it
    reads is audited too. A bare position (an older cursor) reads up to today's head."""
    if cursor is None:
        return 0, head()
    after, _, upto = cursor.partition(":")
    if not _position(after) or not (upto == "" or _position(upto)):
        raise InvalidRequest("malformed cursor")
    return int(after), int(upto) if upto else head()


def _position(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 18


class ComplianceController(Controller):
    path = "/v1/compliance"

    @syscall_post("/ledger/verify", compliance("compliance.ledger.verify"))
    def verify(self, request: Req, data: JSONBody[VerifyLedgerBody | None] = None) -> VerifyLedgerResponse:
        state = api_state(request)
        checkpoint = data.checkpoint if data is not None else None

        def run(_c: Call) -> VerifyLedgerResponse:
            try:
                report = state.runtime.ledger.verify(checkpoint)
            except InvalidCheckpoint as error:
                raise InvalidRequest(str(error)) from error
            return VerifyLedgerResponse(
                ok=report.ok,
                checked=report.checked,
                head=Head(report.head_position, report.head_hash),
                first_bad_position=report.first_bad_position,
                problem=public_problem(report),
            )

        return query(request, run, lambda r: "ok" if r.ok else f"broken at {r.first_bad_position}")

    @syscall_post("/ledger/checkpoint", compliance("compliance.ledger.checkpoint"))
    def checkpoint(self, request: Req) -> Checkpoint:
        state = api_state(request)
        return query(
            request,
            lambda c: checkpoint_now(state, c.identity),
            lambda c: f"position {c.position}",
        )

    @syscall_get(
        "/checkpoints",
        compliance("compliance.checkpoints", query=frozenset(CheckpointsQuery.__struct_fields__)),
    )
    def checkpoints(self, request: Req) -> CheckpointsResponse:
        state = api_state(request)
        params = dict(request.query_params.items())

        def run(c: Call) -> CheckpointsResponse:
            asked = paged_query(params, CheckpointsQuery)
            if asked.cursor is not None and not _position(asked.cursor):
                raise InvalidRequest("malformed cursor")
            before = int(asked.cursor) if asked.cursor is not None else None
            kept = state.runtime.ledger.checkpoint_log.newest(asked.limit, before, tree_of(state, c.identity))
            cursor = str(kept[-1].seq) if len(kept) == asked.limit else None
            return CheckpointsResponse(checkpoints=[k.checkpoint for k in kept], next_cursor=cursor)

        return query(request, run, lambda r: f"{len(r.checkpoints)} checkpoints")

    @syscall_get(
        "/audit",
        compliance(
            "compliance.audit", query=frozenset(AuditQuery.__struct_fields__), allow=frozenset({"actor"})
        ),
    )
    def audit(self, request: Req) -> AuditResponse:
        state = api_state(request)
        params = dict(request.query_params.items())

        def run(c: Call) -> AuditResponse:
            asked = paged_query(params, AuditQuery)
            bound, upto = audit_cursor(asked.cursor, state.runtime.ledger.head_position)
            newest = asked.order == "newest"
            where = AuditFilter(
                since=compliance_time("since", asked.since),
                until=compliance_time("until", asked.until),
                actor=asked.actor,
                op=asked.op,
                outcome=asked.outcome,
                after=0 if newest else bound,
                before=bound if newest and asked.cursor is not None else None,
                upto=upto,
                limit=asked.limit,
                newest=newest,
            )
            records = state.reads.audit(c.identity.namespace, where)
            cursor = f"{records[-1].position}:{upto}" if len(records) == asked.limit else None
            return AuditResponse(records=list(records), next_cursor=cursor)

        return query(
            request, run, lambda r: f"{len(r.records)} records; {quote_text(request.url.query, 150)}"
        )


def public_problem(report: ChainReport) -> str | None:
    """The problem, without naming another tenant: a broken tenant chain on a ledger whose
    single chain holds is said to be one, the operator's ``ledger verify`` names it."""
    if report.ok or report.first_bad_position is not None:
        return report.problem
    return "a tenant chain is broken (memwarden ledger verify names it)"
