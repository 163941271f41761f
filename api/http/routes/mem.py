"""Syscalls: ``POST /v1/mem/<name>``. Thin: struct in, command or query, result out.
The gate (api/http/gate.py) has already checked role, policy, tenant, rate limit and body."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Request, Response
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from memwarden.api.http.gate import Call, command, query
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
from memwarden.api.http.state import ApiState
from memwarden.bootstrap.api import ApiProcess
from memwarden.bootstrap.tickets import WriteTickets
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.identity import REVIEWER_ROLES, WRITER_ROLES
from memwarden.domain.model.policies import EffectivePolicy
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.working_sets import Capsule, FaultAnswer, WorkingSetService
from memwarden.domain.settings import Settings
from memwarden.projections.memory_objects.views import MemoryView
from memwarden.projections.reads import ReadModels
from memwarden.projections.search.service import SearchAnswer
from memwarden.projections.search.stages import timed_stages
from memwarden.projections.timeline.memory_at import MemoryAt, read_at

Req = Request[Any, Any, Any]


def policy_view(
    governance: NamedDependency[GovernanceService], call: Call, policy: EffectivePolicy
) -> PolicyResponse:
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
    def write(
        self,
        request: Req,
        data: JSONBody[WriteBody],
        memory: NamedDependency[MemoryService],
        tickets: NamedDependency[WriteTickets],
    ) -> Response[WriteResponse | TicketResponse]:
        if data.run_async:
            ticket = command(request, lambda c: tickets.submit(c.identity, c.key_id, data.batch_item()))
            return Response(TicketResponse(ticket), status_code=202)
        result = command(request, lambda c: memory.write(c.identity, data.command(), verbatim=data.verbatim))
        return Response(WriteResponse.of(result))

    @syscall_post(
        "/write_batch", Syscall(name="write_batch", roles=WRITER_ROLES, per_item=frozenset({"items"}))
    )
    def write_batch(
        self, request: Req, data: JSONBody[WriteBatchBody], memory: NamedDependency[MemoryService]
    ) -> WriteBatchResponse:
        """Up to 256 writes decided in order and appended together; a bad item is rejected
        with its reasons, the rest go in (a malformed batch is a 400 for all of it)."""
        entries = data.entries()  # before the service: a malformed item refuses the batch
        batch = command(request, lambda c: memory.write_batch(c.identity, entries))
        return WriteBatchResponse(results=[WriteResponse.of(r) for r in batch.results])

    @syscall_post("/write_status", Syscall(name="write_status", roles=WRITER_ROLES))
    def write_status(
        self,
        request: Req,
        data: JSONBody[TicketBody],
        tickets: NamedDependency[WriteTickets],
        edge: NamedDependency[ApiState],
    ) -> TicketStatus:
        def run(c: Call) -> TicketStatus | None:
            found = tickets.status(data.ticket, c.identity)
            if found is None:
                return None
            position = (found.result or {}).get("position")
            if isinstance(position, int):  # read-your-writes, wherever the ticket ran
                edge.callers.note_write(c.key_id, position)
            return TicketStatus(state=found.state, result=found.result)

        return query(request, run, lambda s: f"ticket {data.ticket} {s.state}")

    @syscall_post("/read", Syscall(name="read"))
    def read(
        self, request: Req, data: JSONBody[ReadBody], reads: NamedDependency[ReadModels]
    ) -> MemoryView | MemoryAt:
        if data.as_of is not None or data.valid_at is not None:
            as_of = compliance_time("as_of", data.as_of)
            valid_at = compliance_time("valid_at", data.valid_at)
            return query(
                request,
                lambda c: read_at(reads, c.identity, data.id, as_of, valid_at, after=c.last_write),
                subject=data.id,
            )
        return query(
            request,
            lambda c: reads.read(c.identity, data.id, after=c.last_write),
            subject=data.id,
        )

    @syscall_post("/search", Syscall(name="search"))
    def search(
        self,
        request: Req,
        data: JSONBody[SearchBody],
        reads: NamedDependency[ReadModels],
        settings: NamedDependency[Settings],
    ) -> Response[SearchAnswer]:
        with timed_stages(settings.server_timing) as headers:
            answer = query(
                request,
                lambda c: reads.search.search(
                    c.identity, data.search_query(), c.policy.driver if c.policy else None, after=c.last_write
                ),
                lambda a: f"driver={a.driver} results={len(a.results)}" + (" degraded" if a.degraded else ""),
            )
        return Response(answer, headers=headers)

    @syscall_post("/assemble", Syscall(name="assemble"))
    def assemble(
        self, request: Req, data: JSONBody[AssembleBody], working_sets: NamedDependency[WorkingSetService]
    ) -> Capsule:
        return command(
            request,
            lambda c: working_sets.assemble(c.identity, data.budget_tokens, data.task_hint, c.last_write),
        )

    @syscall_post("/fault", Syscall(name="fault"))
    def fault(
        self, request: Req, data: JSONBody[FaultBody], working_sets: NamedDependency[WorkingSetService]
    ) -> FaultAnswer:
        return command(request, lambda c: working_sets.fault(c.identity, data.question, c.last_write))

    @syscall_post("/history", Syscall(name="history"))
    def history(
        self, request: Req, data: JSONBody[IdBody], reads: NamedDependency[ReadModels]
    ) -> HistoryResponse:
        def run(c: Call) -> HistoryResponse | None:
            steps = reads.history(c.identity, data.id, after=c.last_write)
            return None if steps is None else HistoryResponse(versions=list(steps))

        return query(request, run, lambda h: f"{len(h.versions)} versions", subject=data.id)

    @syscall_post("/verify", Syscall(name="verify", roles=WRITER_ROLES))
    def verify(
        self, request: Req, data: JSONBody[VerifyBody], memory: NamedDependency[MemoryService]
    ) -> VerifyResponse:
        result = command(request, lambda c: memory.verify(c.identity, data.command()))
        return VerifyResponse(id=result.id, trust_tier=result.trust_tier, position=result.position)

    @syscall_post("/stats", Syscall(name="stats"))
    def stats(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        ledger: NamedDependency[Ledger],
        process: NamedDependency[ApiProcess],
    ) -> StatsResponse:
        def run(c: Call) -> StatsResponse:
            counts = reads.counts(c.identity, after=c.last_write)
            autopilot = reads.autopilot_counts(c.identity)
            lag = max(0, ledger.head_position() - reads.runner.position())
            passes = process.passes()
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
    def policy(self, request: Req, governance: NamedDependency[GovernanceService]) -> PolicyResponse:
        def run(c: Call) -> PolicyResponse:
            assert c.policy is not None
            return policy_view(governance, c, c.policy)

        return query(request, run)

    @syscall_post("/policy_ack", Syscall(name="policy_ack"))
    def policy_ack(
        self, request: Req, data: JSONBody[AckBody], governance: NamedDependency[GovernanceService]
    ) -> AckResponse:
        command(request, lambda c: governance.acknowledge(c.identity, data.directive_id))
        return AckResponse(acknowledged=True)

    @syscall_post("/pin", Syscall(name="pin", roles=WRITER_ROLES))
    def pin(
        self,
        request: Req,
        data: JSONBody[IdBody],
        reads: NamedDependency[ReadModels],
        governance: NamedDependency[GovernanceService],
    ) -> PinResponse:
        return _pin(request, data, reads, governance, pinned=True)

    @syscall_post("/unpin", Syscall(name="unpin", roles=WRITER_ROLES))
    def unpin(
        self,
        request: Req,
        data: JSONBody[IdBody],
        reads: NamedDependency[ReadModels],
        governance: NamedDependency[GovernanceService],
    ) -> PinResponse:
        return _pin(request, data, reads, governance, pinned=False)

    @syscall_post("/share", Syscall(name="share", roles=REVIEWER_ROLES))
    def share(
        self,
        request: Req,
        data: JSONBody[ShareBody],
        memory: NamedDependency[MemoryService],
        governance: NamedDependency[GovernanceService],
    ) -> ShareResponse:
        share_id, _ = command(
            request, lambda c: governance.share(c.identity, memory.memory(data.id), data.with_namespace)
        )
        return ShareResponse(share_id)


def _pin(
    request: Req,
    data: IdBody,
    reads: NamedDependency[ReadModels],
    governance: NamedDependency[GovernanceService],
    *,
    pinned: bool,
) -> PinResponse:
    def run(c: Call) -> int:
        visible = reads.read(c.identity, data.id, after=c.last_write) is not None
        position: int = governance.pin(c.identity, data.id, visible, pinned)
        return position

    command(request, run)
    return PinResponse(pinned)
