"""Compliance routes (auditor, admin, owner): the ledger proofs, its checkpoints and the audit
trail."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from litestar import Controller, Request
from litestar.di import NamedDependency
from litestar.params import JSONBody, QueryParameter

from memwarden.api.http.gate import Call, query
from memwarden.api.http.lists import (
    LIST_DEPENDENCIES,
    PAGE_PARAMETERS,
    Cursor,
    Limit,
    Order,
    Page,
    PagingAsked,
    Since,
    Until,
    paging,
)
from memwarden.api.http.routing import Syscall, syscall_get, syscall_post
from memwarden.api.http.schemas import (
    Head,
    VerifyLedgerBody,
    VerifyLedgerResponse,
    compliance_time,
)
from memwarden.api.http.trees import checkpoint_now, tree_of
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.chain import ChainReport
from memwarden.domain.ledger.checkpoints import Checkpoint, InvalidCheckpoint
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.identity import COMPLIANCE_ROLES
from memwarden.domain.model.text import quote_text
from memwarden.projections.governance.views import AuditFilter, AuditView
from memwarden.projections.listing import DEFAULT_LIMIT
from memwarden.projections.reads import ReadModels

Req = Request[Any, Any, Any]


def compliance(op: str, **options: Any) -> Syscall:
    """A compliance syscall: auditors, admins and owners, suspended tenants included."""
    return Syscall(name=op, roles=COMPLIANCE_ROLES, tenant_gate=False, **options)


class CheckpointsPage(Page, frozen=True, kw_only=True):
    items: list[Checkpoint]


class AuditPage(Page, frozen=True, kw_only=True):
    items: list[AuditView]


AUDIT_PARAMETERS = PAGE_PARAMETERS | {"since", "until", "actor", "op", "outcome"}


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
    dependencies = LIST_DEPENDENCIES

    @syscall_post("/ledger/verify", compliance("compliance.ledger.verify"))
    def verify(
        self, request: Req, ledger: NamedDependency[Ledger], data: JSONBody[VerifyLedgerBody | None] = None
    ) -> VerifyLedgerResponse:
        checkpoint = data.checkpoint if data is not None else None

        def run(_c: Call) -> VerifyLedgerResponse:
            try:
                report = ledger.verify(checkpoint)
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
    def checkpoint(
        self, request: Req, ledger: NamedDependency[Ledger], reads: NamedDependency[ReadModels]
    ) -> Checkpoint:
        return query(
            request,
            lambda c: checkpoint_now(ledger, reads.tree, c.identity),
            lambda c: f"position {c.position}",
        )

    @syscall_get("/checkpoints", compliance("compliance.checkpoints", query=PAGE_PARAMETERS))
    def checkpoints(
        self,
        request: Req,
        ledger: NamedDependency[Ledger],
        cursor: Cursor = None,
        limit: Limit = DEFAULT_LIMIT,
        order: Order = "newest",
    ) -> CheckpointsPage:
        """Newest first unless asked otherwise: the checkpoint a verifier wants is the latest."""
        page = paging(cursor, limit, order)

        def run(c: Call) -> CheckpointsPage:
            if page.cursor is not None and not _position(page.cursor):
                raise InvalidRequest("malformed cursor")
            past = int(page.cursor) if page.cursor is not None else None
            kept = ledger.checkpoint_log.listed(
                page.limit, past, tree_of(ledger, c.identity), newest=page.newest
            )
            cursor = str(kept[-1].seq) if len(kept) == page.limit else None
            return CheckpointsPage(items=[k.checkpoint for k in kept], cursor=cursor)

        return query(request, run, lambda r: f"{len(r.items)} checkpoints")

    @syscall_get("/audit", compliance("compliance.audit", query=AUDIT_PARAMETERS, allow=frozenset({"actor"})))
    def audit(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        ledger: NamedDependency[Ledger],
        page: PagingAsked,
        since: Since = None,
        until: Until = None,
        actor: Annotated[
            str | None, QueryParameter(description="only what this actor did", max_length=128)
        ] = None,
        op: Annotated[
            str | None, QueryParameter(description="only this operation (`mem.read` ...)", max_length=64)
        ] = None,
        outcome: Annotated[
            str | None, QueryParameter(description="only this outcome (`ok`, `forbidden` ...)", max_length=64)
        ] = None,
    ) -> AuditPage:
        def run(c: Call) -> AuditPage:
            bound, upto = audit_cursor(page.cursor, ledger.head_position)
            where = AuditFilter(
                since=compliance_time("since", since),
                until=compliance_time("until", until),
                actor=actor,
                op=op,
                outcome=outcome,
                after=0 if page.newest else bound,
                before=bound if page.newest and page.cursor is not None else None,
                upto=upto,
                limit=page.limit,
                newest=page.newest,
            )
            records = reads.audit(c.identity.namespace, where)
            cursor = f"{records[-1].position}:{upto}" if len(records) == page.limit else None
            return AuditPage(items=list(records), cursor=cursor)

        return query(request, run, lambda r: f"{len(r.items)} records; {quote_text(request.url.query, 150)}")


def public_problem(report: ChainReport) -> str | None:
    """The problem, without naming another tenant: a broken tenant chain on a ledger whose
    single chain holds is said to be one, the operator's ``ledger verify`` names it."""
    if report.ok or report.first_bad_position is not None:
        return report.problem
    return "a tenant chain is broken (memwarden ledger verify names it)"
