"""Admin routes (admin, owner; within their subtree): keys, policies, disputes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any, Literal
from uuid import UUID

from litestar import Controller, Request
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from memwarden.api.http.gate import Call, command, current_call, query
from memwarden.api.http.lists import (
    LIST_DEPENDENCIES,
    PAGE_PARAMETERS,
    REVIEW_PARAMETERS,
    CountedPage,
    DecisionsPage,
    DisputesPage,
    FiltersAsked,
    FindingsPage,
    KeysPage,
    PagingAsked,
    ProposalsPage,
    Rule,
)
from memwarden.api.http.routes.mem import policy_view
from memwarden.api.http.routing import Syscall, syscall_get, syscall_post, syscall_put
from memwarden.api.http.schemas import (
    FindingResolveBody,
    NewKeyBody,
    NewKeyResponse,
    OverturnBody,
    OwnPolicyResponse,
    PolicyPutBody,
    ProposalEditBody,
    ProposalResponse,
    ResolveBody,
    RevokeBody,
    RevokeResponse,
)
from memwarden.domain.model.autopilot import DecisionState, FindingState
from memwarden.domain.model.identity import REVIEWER_ROLES
from memwarden.domain.model.memory import DisputeState
from memwarden.domain.model.policies import check_policy_admin, effective_policy
from memwarden.domain.services.autopilot import AutopilotService
from memwarden.domain.services.consolidation import ConsolidationService
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.projections.listing import ListQuery
from memwarden.projections.reads import ReadModels

Req = Request[Any, Any, Any]


RULED = REVIEW_PARAMETERS | {"rule"}
WITHIN = frozenset({"namespace"})
"""A queue's ``namespace`` filter names a subtree to look at, never who the caller is."""
DisputeStatus = Annotated[Literal["open", "resolved", "all"], QueryParameter(description="`all`: any status")]
FindingStatus = Annotated[Literal["open", "resolved", "all"], QueryParameter(description="`all`: any status")]
DecisionStatus = Annotated[
    Literal["settled", "overturned", "all"], QueryParameter(description="`all`: any status")
]
ProposalStatus = Annotated[
    Literal["pending_review", "approved", "rejected", "all"], QueryParameter(description="`all`: any status")
]


def admin(op: str, **options: Any) -> Syscall:
    """An admin syscall: admins and owners, within their subtree."""
    return Syscall(name=op, roles=REVIEWER_ROLES, **options)


def _target(namespace: str) -> str:
    return namespace.lstrip("/")


class AdminController(Controller):
    path = "/v1/admin"
    dependencies = LIST_DEPENDENCIES

    @syscall_post("/keys", admin("admin.keys.create", allow=frozenset({"actor", "role"})))
    def create_key(
        self, request: Req, governance: NamedDependency[GovernanceService], data: JSONBody[NewKeyBody]
    ) -> NewKeyResponse:
        cmd = data.command()
        issued = command(request, lambda c: governance.issue_key(c.identity, cmd))
        return NewKeyResponse(issued.key_id, issued.key)

    @syscall_post("/keys/revoke", admin("admin.keys.revoke"))
    def revoke_key(
        self, request: Req, governance: NamedDependency[GovernanceService], data: JSONBody[RevokeBody]
    ) -> RevokeResponse:
        command(request, lambda c: governance.revoke_key(c.identity, data.key_id))
        return RevokeResponse(revoked=True)

    @syscall_get("/keys", admin("admin.keys.list", query=PAGE_PARAMETERS))
    def list_keys(self, request: Req, reads: NamedDependency[ReadModels], page: PagingAsked) -> KeysPage:
        def run(c: Call) -> KeysPage:
            reads.wait_for(c.last_write)
            asked = ListQuery(limit=page.limit, newest=page.newest, cursor=page.cursor)
            return KeysPage.of(reads.keys(c.identity.namespace, asked))

        return query(request, run, _counted("keys"))

    @syscall_get("/policies/{namespace:path}", admin("admin.policies.get", tenant_gate=False))
    def get_policy(
        self, request: Req, namespace: FromPath[str], governance: NamedDependency[GovernanceService]
    ) -> OwnPolicyResponse:
        target = _target(namespace)

        def run(c: Call) -> OwnPolicyResponse:
            check_policy_admin(c.identity, target)
            return _own_policy(governance, c, target)

        return query(request, run, lambda _p: target)

    @syscall_put("/policies/{namespace:path}", admin("admin.policies.put", tenant_gate=False))
    def put_policy(
        self,
        request: Req,
        namespace: FromPath[str],
        data: JSONBody[PolicyPutBody],
        governance: NamedDependency[GovernanceService],
    ) -> OwnPolicyResponse:
        target, expected = _target(namespace), _expected_version(request, data)
        command(request, lambda c: governance.set_policy(c.identity, target, data.policy(), expected))
        return _own_policy(governance, current_call(request), target)

    @syscall_get("/disputes", admin("admin.disputes.list", query=REVIEW_PARAMETERS, allow=WITHIN))
    def list_disputes(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        filters: FiltersAsked,
        status: DisputeStatus = "open",
    ) -> DisputesPage:
        def run(c: Call) -> DisputesPage:
            asked = filters.query(c.identity, status)
            return DisputesPage.of(reads.disputes(c.identity, asked, after=c.last_write))

        return query(request, run, _counted("disputes"))

    @syscall_post("/disputes/{dispute_id:uuid}/resolve", admin("resolve_dispute"))
    def resolve(
        self,
        request: Req,
        memory: NamedDependency[MemoryService],
        dispute_id: FromPath[UUID],
        data: JSONBody[ResolveBody],
    ) -> DisputeState:
        cmd = data.command(dispute_id)
        result = command(request, lambda c: memory.resolve_dispute(c.identity, cmd))
        dispute: DisputeState = result.dispute
        return dispute

    # -- the conflict autopilot: findings for people, automatic decisions to overturn -------

    @syscall_get("/findings", admin("admin.findings.list", query=RULED | {"group"}, allow=WITHIN))
    def list_findings(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        filters: FiltersAsked,
        status: FindingStatus = "open",
        rule: Rule = None,
        group: Annotated[
            UUID | None,
            QueryParameter(description="only the findings about one statement (a finding's `group_id`)"),
        ] = None,
    ) -> FindingsPage:
        def run(c: Call) -> FindingsPage:
            asked = replace(filters.query(c.identity, status, rule), group=group)
            return FindingsPage.of(reads.findings(c.identity, asked, after=c.last_write))

        return query(request, run, _counted("findings"))

    @syscall_post("/findings/{finding_id:uuid}/resolve", admin("resolve_finding"))
    def resolve_finding(
        self,
        request: Req,
        autopilot: NamedDependency[AutopilotService],
        finding_id: FromPath[UUID],
        data: JSONBody[FindingResolveBody],
    ) -> FindingState:
        cmd = data.command(finding_id)
        result = command(request, lambda c: autopilot.resolve_finding(c.identity, cmd))
        finding: FindingState = result.finding
        return finding

    @syscall_get("/decisions", admin("admin.decisions.list", query=RULED, allow=WITHIN))
    def list_decisions(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        filters: FiltersAsked,
        status: DecisionStatus = "all",
        rule: Rule = None,
    ) -> DecisionsPage:
        def run(c: Call) -> DecisionsPage:
            asked = filters.query(c.identity, status, rule)
            return DecisionsPage.of(reads.decisions(c.identity, asked, after=c.last_write))

        return query(request, run, _counted("decisions"))

    @syscall_post("/decisions/{decision_id:uuid}/overturn", admin("overturn_decision"))
    def overturn(
        self,
        request: Req,
        autopilot: NamedDependency[AutopilotService],
        decision_id: FromPath[UUID],
        data: JSONBody[OverturnBody],
    ) -> DecisionState:
        cmd = data.command(decision_id)
        result = command(request, lambda c: autopilot.overturn(c.identity, cmd))
        decision: DecisionState = result.decision
        return decision

    # -- consolidation: proposals for people ------------------------------------------------

    @syscall_get("/proposals", admin("admin.proposals.list", query=RULED, allow=WITHIN))
    def list_proposals(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        filters: FiltersAsked,
        status: ProposalStatus = "pending_review",
        rule: Rule = None,
    ) -> ProposalsPage:
        def run(c: Call) -> ProposalsPage:
            asked = filters.query(c.identity, status, rule)
            return ProposalsPage.of(reads.proposals(c.identity, asked, after=c.last_write))

        return query(request, run, _counted("proposals"))

    @syscall_post("/proposals/{proposal_id:uuid}/approve", admin("approve_proposal"))
    def approve_proposal(
        self, request: Req, consolidation: NamedDependency[ConsolidationService], proposal_id: FromPath[UUID]
    ) -> ProposalResponse:
        result = command(request, lambda c: consolidation.approve(c.identity, proposal_id))
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @syscall_post("/proposals/{proposal_id:uuid}/edit", admin("edit_proposal"))
    def edit_proposal(
        self,
        request: Req,
        consolidation: NamedDependency[ConsolidationService],
        proposal_id: FromPath[UUID],
        data: JSONBody[ProposalEditBody],
    ) -> ProposalResponse:
        result = command(request, lambda c: consolidation.edit(c.identity, proposal_id, data.content))
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @syscall_post("/proposals/{proposal_id:uuid}/reject", admin("reject_proposal"))
    def reject_proposal(
        self, request: Req, consolidation: NamedDependency[ConsolidationService], proposal_id: FromPath[UUID]
    ) -> ProposalResponse:
        result = command(request, lambda c: consolidation.reject(c.identity, proposal_id))
        return ProposalResponse(proposal=result.proposal, content=result.content)


def _expected_version(request: Req, data: PolicyPutBody) -> int | None:
    """The version a policy change expects: If-Match (a malformed one never matches), else
    the body's ``expected_version``."""
    if_match = request.headers.get("if-match")
    if if_match is None:
        return data.expected_version
    try:
        return int(if_match.strip().strip('"'))
    except ValueError:
        return -1


def _counted(what: str) -> Callable[[CountedPage], str]:
    return lambda found: f"{len(found.items)} of {found.count} {what}"


def _own_policy(governance: NamedDependency[GovernanceService], call: Call, target: str) -> OwnPolicyResponse:
    own = governance.own_policy(target)
    effective = effective_policy(target, governance.own_policies(target))
    return OwnPolicyResponse(
        namespace=target,
        version=own.version,
        conflict_review=own.conflict_review,
        forbid_secrets=own.forbid_secrets,
        rate_limit_per_minute=own.rate_limit_per_minute,
        directives=own.directives,
        driver=own.driver,
        suspended=own.suspended,
        provenance_over_cap=own.provenance_over_cap,
        effective=policy_view(governance, call, effective),
    )
