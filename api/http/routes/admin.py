"""Admin routes (admin, owner; within their subtree): keys, policies, disputes."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from litestar import Controller, Request, get, post, put
from litestar.params import FromPath, JSONBody

from api.http.gate import Call, api_state, command, query
from api.http.routes.mem import policy_view
from api.http.schemas import (
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
from domain.model.autopilot import DecisionState, FindingState, OverturnDecision, ResolveFinding
from domain.model.commands import ResolveDispute
from domain.model.errors import InvalidRequest
from domain.model.identity import REVIEWER_ROLES
from domain.model.keys import IssueKey
from domain.model.memory import DisputeState
from domain.model.policies import PolicyBody, check_policy_admin, effective_policy
from projections.autopilot.views import DecisionView, FindingView, ProposalView
from projections.disputes.views import DisputeView
from projections.governance.views import KeyView

Req = Request[Any, Any, Any]


def admin(op: str, body: type | None, **extra: Any) -> dict[str, Any]:
    return {"op": op, "body": body, "roles": REVIEWER_ROLES, **extra}


def _target(namespace: str) -> str:
    return namespace.lstrip("/")


class AdminController(Controller):
    path = "/v1/admin"

    @post(
        "/keys",
        opt=admin("admin.keys.create", NewKeyBody, allow=frozenset({"actor", "role"})),
        sync_to_thread=True,
        status_code=200,
    )
    def create_key(self, request: Req, data: JSONBody[NewKeyBody]) -> NewKeyResponse:
        state = api_state(request)
        cmd = IssueKey(target=data.target, actor=data.actor, role=data.role)
        issued = command(request, lambda c: state.governance.issue_key(c.identity, cmd))
        return NewKeyResponse(issued.key_id, issued.key)

    @post("/keys/revoke", opt=admin("admin.keys.revoke", RevokeBody), sync_to_thread=True, status_code=200)
    def revoke_key(self, request: Req, data: JSONBody[RevokeBody]) -> RevokeResponse:
        state = api_state(request)
        command(request, lambda c: state.governance.revoke_key(c.identity, data.key_id))
        return RevokeResponse(revoked=True)

    @get("/keys", opt=admin("admin.keys.list", None), sync_to_thread=True)
    def list_keys(self, request: Req) -> list[KeyView]:
        state = api_state(request)

        def run(c: Call) -> list[KeyView]:
            state.reads.wait_for(c.last_write)
            keys: list[KeyView] = state.reads.keys(c.identity.namespace)
            return keys

        return query(request, run, lambda keys: f"{len(keys)} keys")

    @get(
        "/policies/{namespace:path}",
        opt=admin("admin.policies.get", None, tenant_gate=False),
        sync_to_thread=True,
    )
    def get_policy(self, request: Req, namespace: FromPath[str]) -> OwnPolicyResponse:
        state = api_state(request)
        target = _target(namespace)

        def run(c: Call) -> OwnPolicyResponse:
            check_policy_admin(c.identity, target)
            return _own_policy(state, c, target)

        return query(request, run, lambda _p: target)

    @put(
        "/policies/{namespace:path}",
        opt=admin("admin.policies.put", PolicyPutBody, tenant_gate=False),
        sync_to_thread=True,
        status_code=200,
    )
    def put_policy(
        self, request: Req, namespace: FromPath[str], data: JSONBody[PolicyPutBody]
    ) -> OwnPolicyResponse:
        state = api_state(request)
        target = _target(namespace)
        expected = data.expected_version
        if_match = request.headers.get("if-match")
        if if_match is not None:
            try:
                expected = int(if_match.strip().strip('"'))
            except ValueError:
                expected = -1  # a malformed If-Match never matches
        fields = {f: getattr(data, f) for f in PolicyBody.__struct_fields__}
        body = PolicyBody(**fields)
        command(request, lambda c: state.governance.set_policy(c.identity, target, body, expected))
        call: Call = request.state.call
        return _own_policy(state, call, target)

    @get(
        "/disputes", opt=admin("admin.disputes.list", None, query=frozenset({"status"})), sync_to_thread=True
    )
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

    @post(
        "/disputes/{dispute_id:uuid}/resolve",
        opt=admin("resolve_dispute", ResolveBody),
        sync_to_thread=True,
        status_code=200,
    )
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

    @get(
        "/findings", opt=admin("admin.findings.list", None, query=frozenset({"status"})), sync_to_thread=True
    )
    def list_findings(self, request: Req) -> list[FindingView]:
        state = api_state(request)

        def run(c: Call) -> list[FindingView]:
            status = _status(request, {"open", "resolved"}, "open")
            found: list[FindingView] = state.reads.findings(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} findings")

    @post(
        "/findings/{finding_id:uuid}/resolve",
        opt=admin("resolve_finding", FindingResolveBody),
        sync_to_thread=True,
        status_code=200,
    )
    def resolve_finding(
        self, request: Req, finding_id: FromPath[UUID], data: JSONBody[FindingResolveBody]
    ) -> FindingState:
        state = api_state(request)
        cmd = ResolveFinding(finding_id=finding_id, decision=data.decision, reason=data.reason)
        result = command(request, lambda c: state.runtime.autopilot.resolve_finding(c.identity, cmd))
        finding: FindingState = result.finding
        return finding

    @get(
        "/decisions",
        opt=admin("admin.decisions.list", None, query=frozenset({"status"})),
        sync_to_thread=True,
    )
    def list_decisions(self, request: Req) -> list[DecisionView]:
        state = api_state(request)

        def run(c: Call) -> list[DecisionView]:
            status = _status(request, {"settled", "overturned"}, "all")
            found: list[DecisionView] = state.reads.decisions(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} decisions")

    @post(
        "/decisions/{decision_id:uuid}/overturn",
        opt=admin("overturn_decision", OverturnBody),
        sync_to_thread=True,
        status_code=200,
    )
    def overturn(
        self, request: Req, decision_id: FromPath[UUID], data: JSONBody[OverturnBody]
    ) -> DecisionState:
        state = api_state(request)
        cmd = OverturnDecision(decision_id=decision_id, reason=data.reason)
        result = command(request, lambda c: state.runtime.autopilot.overturn(c.identity, cmd))
        decision: DecisionState = result.decision
        return decision

    # -- consolidation: proposals for people ------------------------------------------------

    @get(
        "/proposals",
        opt=admin("admin.proposals.list", None, query=frozenset({"status"})),
        sync_to_thread=True,
    )
    def list_proposals(self, request: Req) -> list[ProposalView]:
        state = api_state(request)

        def run(c: Call) -> list[ProposalView]:
            status = _status(request, {"pending_review", "approved", "rejected"}, "pending_review")
            found: list[ProposalView] = state.reads.proposals(c.identity, status, after=c.last_write)
            return found

        return query(request, run, lambda found: f"{len(found)} proposals")

    @post(
        "/proposals/{proposal_id:uuid}/approve",
        opt=admin("approve_proposal", None),
        sync_to_thread=True,
        status_code=200,
    )
    def approve_proposal(self, request: Req, proposal_id: FromPath[UUID]) -> ProposalResponse:
        state = api_state(request)
        result = command(request, lambda c: state.runtime.consolidation.approve(c.identity, proposal_id))
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @post(
        "/proposals/{proposal_id:uuid}/edit",
        opt=admin("edit_proposal", ProposalEditBody),
        sync_to_thread=True,
        status_code=200,
    )
    def edit_proposal(
        self, request: Req, proposal_id: FromPath[UUID], data: JSONBody[ProposalEditBody]
    ) -> ProposalResponse:
        state = api_state(request)
        result = command(
            request, lambda c: state.runtime.consolidation.edit(c.identity, proposal_id, data.content)
        )
        return ProposalResponse(proposal=result.proposal, content=result.content)

    @post(
        "/proposals/{proposal_id:uuid}/reject",
        opt=admin("reject_proposal", None),
        sync_to_thread=True,
        status_code=200,
    )
    def reject_proposal(self, request: Req, proposal_id: FromPath[UUID]) -> ProposalResponse:
        state = api_state(request)
        result = command(request, lambda c: state.runtime.consolidation.reject(c.identity, proposal_id))
        return ProposalResponse(proposal=result.proposal, content=result.content)


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
        effective=policy_view(state.governance, call, effective),
    )
