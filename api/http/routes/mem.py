"""Syscalls: ``POST /v1/mem/<name>``. Thin: struct in, command or query, result out.
The gate (api/http/gate.py) has already checked role, policy, tenant, rate limit and body."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from memwarden.api.http.gate import Call, api_state, command, query
from memwarden.api.http.routing import Syscall, syscall_post
from memwarden.api.http.schemas import (
    AckBody,
    AckResponse,
    AssembleBody,
    DirectiveView,
    FaultBody,
    HistoryResponse,
    IdBody,
    PinResponse,
    PolicyResponse,
    ReadBody,
    SearchBody,
    ShareBody,
    ShareResponse,
    StatsResponse,
    TicketBody,
    TicketResponse,
    TicketStatus,
    VerifyBody,
    VerifyResponse,
    WriteBatchBody,
    WriteBatchResponse,
    WriteBody,
    WriteResponse,
    compliance_time,
)
from memwarden.domain.model.commands import VerifyMemory
from memwarden.domain.model.identity import REVIEWER_ROLES, WRITER_ROLES
from memwarden.domain.model.policies import EffectivePolicy
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.working_sets import Capsule, FaultAnswer
from memwarden.projections.memory_objects.views import MemoryView
from memwarden.projections.search.service import SearchAnswer
from memwarden.projections.search.stages import timed_stages
from memwarden.projections.timeline.memory_at import MemoryAt, read_at
from memwarden.workers.heartbeats import passes_probe

Req = Request[Any, Any, Any]


def policy_view(governance: GovernanceService, call: Call, policy: EffectivePolicy) -> PolicyResponse:
    acked = governance.acknowledged(call.identity, policy)
    return PolicyResponse(
        namespace=policy.namespace,
        conflict_review=policy.conflict_review,
        forbid_secrets=policy.forbid_secrets,
        rate_limit_per_minute=policy.rate_limit_per_minute,
        driver=policy.driver,
        suspended=policy.suspended,
        provenance_over_cap=policy.provenance_over_cap,
        directives=[
            DirectiveView(
                id=d.id, text=d.text, namespace=d.namespace, acknowledged=(d.namespace, d.id) in acked
            )
            for d in policy.directives
        ],
    )


class MemController(Controller):
    path = "/v1/mem"

    @syscall_post(
        "/write",
        Syscall(name="write", roles=WRITER_ROLES),
        responses={
            202: ResponseSpec(
                data_container=TicketResponse,
                description="`async: true`: the write is queued; `write_status` with the ticket tells its result",
            )
        },
    )
    def write(self, request: Req, data: JSONBody[WriteBody]) -> Response[WriteResponse | TicketResponse]:
        state = api_state(request)
        if data.run_async:
            ticket = command(request, lambda c: state.tickets.submit(c.identity, c.key_id, data))
            return Response(TicketResponse(ticket), status_code=202)
        result = command(
            request, lambda c: state.memory.write(c.identity, data.command(), verbatim=data.verbatim)
        )
        return Response(WriteResponse.of(result))

    @syscall_post(
        "/write_batch", Syscall(name="write_batch", roles=WRITER_ROLES, per_item=frozenset({"items"}))
    )
    def write_batch(self, request: Req, data: JSONBody[WriteBatchBody]) -> WriteBatchResponse:
        """Up to 256 writes decided in order and appended together; a bad item is rejected
        with its reasons, the rest go in (a malformed batch is a 400 for all of it)."""
        state = api_state(request)
        entries = data.entries()  # before the service: a malformed item refuses the batch
        batch = command(request, lambda c: state.memory.write_batch(c.identity, entries))
        return WriteBatchResponse(results=[WriteResponse.of(r) for r in batch.results])

    @syscall_post("/write_status", Syscall(name="write_status", roles=WRITER_ROLES))
    def write_status(self, request: Req, data: JSONBody[TicketBody]) -> TicketStatus:
        state = api_state(request)

        def run(c: Call) -> TicketStatus | None:
            status = state.tickets.status(data.ticket, c.identity)
            position = (status.result or {}).get("position") if status is not None else None
            if isinstance(position, int):  # read-your-writes, wherever the ticket ran
                state.callers.note_write(c.key_id, position)
            return status

        return query(request, run, lambda s: f"ticket {data.ticket} {s.state}")

    @syscall_post("/read", Syscall(name="read"))
    def read(self, request: Req, data: JSONBody[ReadBody]) -> MemoryView | MemoryAt:
        state = api_state(request)
        if data.as_of is not None or data.valid_at is not None:
            as_of = compliance_time("as_of", data.as_of)
            valid_at = compliance_time("valid_at", data.valid_at)
            return query(
                request,
                lambda c: read_at(state.reads, c.identity, data.id, as_of, valid_at, after=c.last_write),
                subject=data.id,
            )
        return query(
            request,
            lambda c: state.reads.read(c.identity, data.id, after=c.last_write),
            subject=data.id,
        )

    @syscall_post("/search", Syscall(name="search"))
    def search(self, request: Req, data: JSONBody[SearchBody]) -> Response[SearchAnswer]:
        state = api_state(request)
        with timed_stages(state.runtime.settings.server_timing) as headers:
            answer = query(
                request,
                lambda c: state.reads.search.search(
                    c.identity, data.search_query(), c.policy.driver if c.policy else None, after=c.last_write
                ),
                lambda a: f"driver={a.driver} results={len(a.results)}" + (" degraded" if a.degraded else ""),
            )
        return Response(answer, headers=headers)

    @syscall_post("/assemble", Syscall(name="assemble"))
    def assemble(self, request: Req, data: JSONBody[AssembleBody]) -> Capsule:
        sets = api_state(request).runtime.working_sets
        return command(
            request,
            lambda c: sets.assemble(c.identity, data.budget_tokens, data.task_hint, c.last_write),
        )

    @syscall_post("/fault", Syscall(name="fault"))
    def fault(self, request: Req, data: JSONBody[FaultBody]) -> FaultAnswer:
        sets = api_state(request).runtime.working_sets
        return command(request, lambda c: sets.fault(c.identity, data.question, c.last_write))

    @syscall_post("/history", Syscall(name="history"))
    def history(self, request: Req, data: JSONBody[IdBody]) -> HistoryResponse:
        state = api_state(request)

        def run(c: Call) -> HistoryResponse | None:
            steps = state.reads.history(c.identity, data.id, after=c.last_write)
            return None if steps is None else HistoryResponse(versions=list(steps))

        return query(request, run, lambda h: f"{len(h.versions)} versions", subject=data.id)

    @syscall_post("/verify", Syscall(name="verify", roles=WRITER_ROLES))
    def verify(self, request: Req, data: JSONBody[VerifyBody]) -> VerifyResponse:
        state = api_state(request)
        cmd = VerifyMemory(memory_id=data.id, supports=data.supports, note=data.note)
        result = command(request, lambda c: state.memory.verify(c.identity, cmd))
        return VerifyResponse(id=result.id, trust_tier=result.trust_tier, position=result.position)

    @syscall_post("/stats", Syscall(name="stats"))
    def stats(self, request: Req) -> StatsResponse:
        state = api_state(request)

        def run(c: Call) -> StatsResponse:
            counts = state.reads.counts(c.identity, after=c.last_write)
            autopilot = state.reads.autopilot_counts(c.identity)
            lag = max(0, state.runtime.ledger.head_position() - state.reads.runner.position())
            passes = passes_probe(state.runtime.settings).health()
            return StatsResponse(
                namespace=c.identity.namespace,
                **msgspec.structs.asdict(counts),
                open_findings=autopilot.open_findings,
                open_proposals=autopilot.open_proposals,
                unjudged=autopilot.unjudged,
                projection_lag=lag,
                passes=passes,
            )

        return query(request, run)

    @syscall_post("/policy", Syscall(name="policy"))
    def policy(self, request: Req) -> PolicyResponse:
        state = api_state(request)

        def run(c: Call) -> PolicyResponse:
            assert c.policy is not None
            return policy_view(state.governance, c, c.policy)

        return query(request, run)

    @syscall_post("/policy_ack", Syscall(name="policy_ack"))
    def policy_ack(self, request: Req, data: JSONBody[AckBody]) -> AckResponse:
        state = api_state(request)
        command(request, lambda c: state.governance.acknowledge(c.identity, data.directive_id))
        return AckResponse(acknowledged=True)

    @syscall_post("/pin", Syscall(name="pin", roles=WRITER_ROLES))
    def pin(self, request: Req, data: JSONBody[IdBody]) -> PinResponse:
        return _pin(request, data, pinned=True)

    @syscall_post("/unpin", Syscall(name="unpin", roles=WRITER_ROLES))
    def unpin(self, request: Req, data: JSONBody[IdBody]) -> PinResponse:
        return _pin(request, data, pinned=False)

    @syscall_post("/share", Syscall(name="share", roles=REVIEWER_ROLES))
    def share(self, request: Req, data: JSONBody[ShareBody]) -> ShareResponse:
        state = api_state(request)
        share_id, _ = command(
            request,
            lambda c: state.governance.share(c.identity, state.memory.memory(data.id), data.with_namespace),
        )
        return ShareResponse(share_id)


def _pin(request: Req, data: IdBody, pinned: bool) -> PinResponse:
    state = api_state(request)

    def run(c: Call) -> int:
        visible = state.reads.read(c.identity, data.id, after=c.last_write) is not None
        position: int = state.governance.pin(c.identity, data.id, visible, pinned)
        return position

    command(request, run)
    return PinResponse(pinned)
