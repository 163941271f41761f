"""Admin routes (admin, owner; within their subtree): keys, policies, disputes."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request
from litestar.params import FromPath, JSONBody

from memwarden.api.http.gate import Call, api_state, command, current_call, query
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
from memwarden.domain.model.autopilot import DecisionState, FindingState, OverturnDecision, ResolveFinding
from memwarden.domain.model.commands import ResolveDispute
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.identity import REVIEWER_ROLES
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.memory import DisputeState
from memwarden.domain.model.policies import check_policy_admin, effective_policy
from memwarden.projections.autopilot.views import DecisionView, FindingView, ProposalView
from memwarden.projections.disputes.views import DisputeView
from memwarden.projections.governance.views import KeyView

Req = Request[Any, Any, Any]


STATUS_QUERY = frozenset({"status"})
"""The one query parameter a listing takes."""


def admin(op: str, **options: Any) -> Syscall:
    """An admin syscall: admins and owners, within their subtree."""
    return Syscall(name=op, roles=REVIEWER_ROLES, **options)


def _target(namespace: str) -> str:
    return namespace.lstrip("/")


class AdminController(Controller):
    path = "/v1/admin"

    @syscall_post("/keys", admin("admin.keys.create", allow=frozenset({"actor", "role"})))
    def create_key(self, request: Req, data: JSONBody[NewKeyBody]) -> NewKeyResponse:
        state = api_state(request)
        cmd = IssueKey(
            target=data.target, actor=data.actor, role=data.role, max_provenance=data.max_provenance
        )
        issued = command(request, lambda c: state.governance.issue_key(c.identity, cmd))
        return NewKeyResponse(issued.key_id, issued.key)

    @syscall_post("/keys/revoke", admin("admin.keys.revoke"))
    def revoke_key(self, request: Req, data: JSONBody[RevokeBody]) -> RevokeResponse:
        state = api_state(request)
        command(request, lambda c: state.governance.revoke_key(c.identity, data.key_id))
        return RevokeResponse(revoked=True)

    @syscall_get("/keys", admin("admin.keys.list"))
    def list_keys(self, request: Req) -> list[KeyView]:
        state = api_state(request)

        def run(c: Call) -> list[KeyView]:
            state.reads.wait_for(c.last_write)
            keys: list[KeyView] = state.reads.keys(c.identity.namespace)
            return keys

        return query(request, run, lambda keys: f"{len(keys)} keys")

    @syscall_get("/policies/{namespace:path}", admin("admin.policies.get", tenant_gate=False))
    def get_policy(self, request: Req, namespace: FromPath[str]) -> OwnPolicyResponse:
        state = api_state(request)
        target = _target(namespace)

        def run(c: Call) -> OwnPolicyResponse:
            check_policy_admin(c.identity, target)
            return _own_policy(state, c, target)

        return query(request, run, lambda _p: target)

    @syscall_put("/policies/{namespace:path}", admin("admin.policies.put", tenant_gate=False))
    def put_policy(
        self, request: Req, namespace: FromPath[str], data: JSONBody[PolicyPutBody]
    ) -> OwnPolicyResponse:
        state, target, expected = api_state(request), _target(namespace), _expected_version(request, data)
        command(request, lambda c: state.governance.set_policy(c.identity, target, data.policy(), expected))
        return _own_policy(state, current_call(request), target)

    @syscall_get("/disputes", admin("admin.disputes.list", query=STATUS_QUERY))
    def list_disputes(self, request: Req) -> list[DisputeView]:
        state = api_state(request)
        status = request.query_params.get("status", "open")

        def run(c: Call) -> list[DisputeView]:
            if status not in {"open", "resolved", "all"}:
                raise InvalidRequest("status must be open, resolved or all")
            found: list[DisputeView] = state.reads.disputes(
                c.identity, None if status == "all" else status, after=c.last_write
            )
            return found

        return query(request, run, lambda found: f"{len(found)} disputes")

    @syscall_post("/disputes/{dispute_id:uuid}/resolve", admin("resolve_dispute"))
    def resolve(self, request: Req, dispute_id: FromPath[UUID], data: JSONBody[ResolveBody]) -> DisputeState:
        state = api_state(request)
        cmd = ResolveDispute(
            dispute_id=dispute_id,
            decision=data.decision,
            content=data.content,
            value=data.value,
            reason=data.reason,
        )
        result = command(request, lambda c: state.memory.resolve_dispute(c.identity, cmd))
        dispute: DisputeState = result.dispute
        return dispute

    # -- the conflict autopilot: findings for people, automatic decisions to overturn -------

    @syscall_get("/findings", admin("admin.findings.list", query=STATUS_QUERY))
    def list_findings(self, request: Req) -> list[FindingView]:
        state = api_state(request)

        def run(c: Call) -> list[FindingView]:
            status = _status(request, {"open", "resolved"}, "open")
            found: list[FindingView] = state.reads.findings(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} findings")

    @syscall_post("/findings/{finding_id:uuid}/resolve", admin("resolve_finding"))
    def resolve_finding(
        self, request: Req, finding_id: FromPath[UUID], data: JSONBody[FindingResolveBody]
    ) -> FindingState:
        state = api_state(request)
        cmd = ResolveFinding(finding_id=finding_id, decision=data.decision, reason=data.reason)
        result = command(request, lambda c: state.runtime.autopilot.resolve_finding(c.identity, cmd))
        finding: FindingState = result.finding
        return finding

    @syscall_get("/decisions", admin("admin.decisions.list", query=STATUS_QUERY))
    def list_decisions(self, request: Req) -> list[DecisionView]:
        state = api_state(request)

        def run(c: Call) -> list[DecisionView]:
            status = _status(request, {"settled", "overturned"}, "all")
            found: list[DecisionView] = state.reads.decisions(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} decisions")

    @syscall_post("/decisions/{decision_id:uuid}/overturn", admin("overturn_decision"))
    def overturn(
        self, request: Req, decision_id: FromPath[UUID], data: JSONBody[OverturnBody]
    ) -> DecisionState:
        state = api_state(request)
        cmd = OverturnDecision(decision_id=decision_id, reason=data.reason)
        result = command(request, lambda c: state.runtime.autopilot.overturn(c.identity, cmd))
        decision: DecisionState = result.decision
        return decision

    # -- consolidation: proposals for people ------------------------------------------------

    @syscall_get("/proposals", admin("admin.proposals.list", query=STATUS_QUERY))
    def list_proposals(self, request: Req) -> list[ProposalView]:
        state = api_state(request)

        def run(c: Call) -> list[ProposalView]:
            status = _status(request, {"pending_review", "approved", "rejected"}, "pending_review")
            found: list[ProposalView] = state.reads.proposals(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} proposals")

    @syscall_post("/proposals/{proposal_id:uuid}/approve", admin("approve_proposal"))
    def approve_proposal(self, request: Req, proposal_id: FromPath[UUID]) -> ProposalResponse:
        state = api_state(request)
        result = command(request, lambda c: state.runtime.consolidation.approve(c.identity, proposal_id))
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @syscall_post("/proposals/{proposal_id:uuid}/edit", admin("edit_proposal"))
    def edit_proposal(
        self, request: Req, proposal_id: FromPath[UUID], data: JSONBody[ProposalEditBody]
    ) -> ProposalResponse:
        state = api_state(request)
        result = command(
            request, lambda c: state.runtime.consolidation.edit(c.identity, proposal_id, data.content)
        )
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @syscall_post("/proposals/{proposal_id:uuid}/reject", admin("reject_proposal"))
    def reject_proposal(self, request: Req, proposal_id: FromPath[UUID]) -> ProposalResponse:
        state = api_state(request)
        result = command(request, lambda c: state.runtime.consolidation.reject(c.identity, proposal_id))
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


def _status(request: Req, statuses: set[str], default: str) -> str | None:
    """The ``status`` query parameter: one of ``statuses`` or ``all`` (None: no filter)."""
    status = request.query_params.get("status", default)
    if status != "all" and status not in statuses:
        raise InvalidRequest(f"status must be {', '.join(sorted(statuses))} or all")
    return None if status == "all" else status


def _own_policy(state: Any, call: Call, target: str) -> OwnPolicyResponse:
    own = state.governance.own_policy(target)
    effective = effective_policy(target, state.governance.own_policies(target))
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
        effective=policy_view(state.governance, call, effective),
    )
