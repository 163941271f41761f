"""The conflict autopilot as a plain service (docs/architecture.md section 5): one memory's pass under
the namespace's lease, findings resolved and settlements overturned by reviewers.

The actor (workers/) and the in-process fallback of ``memwarden serve`` both call
``AutopilotService.judge_memory``; it needs nothing of a broker. What it needs from the
read side, the nearest current neighbours a writer can see, is the ``Neighbours`` port,
declared in domain/ports.py, which the search index implements
(projections/search/neighbours.py). Every append goes through the command runner.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.model.autopilot import (
    AUTOPILOT,
    MIN_COSINE,
    NEIGHBOURS_K,
    DecisionState,
    FindingState,
    OverturnDecision,
    ResolveFinding,
    decide_overturn,
    decide_pass,
    decide_resolve_finding,
    evolve_decision,
    evolve_finding,
    judged_event,
    judgement_stream,
)
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    ConflictReview,
    ConflictSettled,
    ConflictsJudged,
    Event,
    FindingOpened,
    JudgedOutcome,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.judging import Judge, JudgeUnavailable, Statement
from memwarden.domain.model.leases import Lease
from memwarden.domain.model.memory import Claim, MemoryState, evolve_memory
from memwarden.domain.model.settling import Pair
from memwarden.domain.ports import CommandLedger, Neighbours, Pending
from memwarden.domain.services.commands import Decided, Note, Retry
from memwarden.domain.services.leases import Leases
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.streams import fold
from memwarden.domain.services.vectors import Vectors

log = logging.getLogger(__name__)
S = TypeVar("S")
MAX_PASS_MEMORIES = 32
"""The most memories one pass judges (its message's and those pending it takes along): a
pass must end well inside its lease."""
PENDING_WINDOW = timedelta(minutes=2)
"""How far back a pass looks for other memories of its namespace waiting to be judged."""


class PassResult(msgspec.Struct, frozen=True, kw_only=True):
    memory_id: UUID
    outcome: JudgedOutcome | None
    """What the pass recorded; None when an earlier pass (a redelivery's original) had."""
    pairs: int = 0
    findings: int = 0
    settled: int = 0
    position: int | None = None


class FindingResult(msgspec.Struct, frozen=True, kw_only=True):
    finding: FindingState
    position: int


class DecisionResult(msgspec.Struct, frozen=True, kw_only=True):
    decision: DecisionState
    position: int


class AutopilotService:
    def __init__(
        self,
        memory: MemoryService,
        leases: Leases,
        neighbours: Neighbours,
        judge: Judge | None,
        dial_for: Callable[[str], ConflictReview],
        pending: Pending | None = None,
    ) -> None:
        self.memory = memory
        self.leases = leases
        self.neighbours = neighbours
        self.judge = judge
        self.dial_for = dial_for
        self.pending = pending

    @property
    def ledger(self) -> CommandLedger:
        return self.memory.ledger

    # -- the pass --------------------------------------------------------------------------

    def judge_memory(self, memory_id: UUID, position: int, holder: str) -> PassResult:
        """Judge one memory against its nearest older neighbours and settle what contradicts,
        under ``holder``'s lease on the memory's namespace (``judge_with_lease``).
        Idempotent: a memory already judged is left alone, without a lease. ``LeaseBusy``:
        another holder has the namespace now (try later)."""
        return self.judge_memories([memory_id], position, holder)[0]

    def judge_memories(
        self, memory_ids: Sequence[UUID], position: int, holder: str, *, take_along: bool = False
    ) -> list[PassResult]:
        """``judge_memory`` for several memories (the dispatcher's batch of a namespace, all
        committed by ``position``): the passes of one namespace's memories share one lease
        take and one fenced append. ``take_along``: with the other recent memories of the
        namespace still waiting for a pass (``_pending``). A result per id asked, in order.
        ``LeaseBusy``: another holder has a namespace now; the namespaces passed before it
        keep what they appended, and a retry of the whole batch leaves them alone."""
        ids = list(dict.fromkeys(memory_ids))
        memories = self.memory.streams.memories(ids)
        judged = self._judged(ids)
        by_namespace: dict[str, list[UUID]] = {}
        for memory_id in ids:
            if memory_id in memories and not judged[memory_id][0]:
                by_namespace.setdefault(memories[memory_id].namespace, []).append(memory_id)
        results = {m: PassResult(memory_id=m, outcome=None) for m in ids}
        for namespace, todo in by_namespace.items():
            lease = self.leases.acquire(AUTOPILOT, namespace, holder)
            more = self._pending(namespace, todo) if take_along else []
            batch = [*todo, *(m for m, _ in more)]
            # the judged state of those taken along is read with the others' again, in one query
            read = None if more else {m: judged[m][1] for m in todo}
            at = max([position, *(p for _, p in more)])
            results.update((r.memory_id, r) for r in self.judge_batch_with_lease(lease, batch, at, read))
        return [results[m] for m in ids]

    def _pending(self, namespace: str, todo: list[UUID]) -> list[tuple[UUID, int]]:
        """Other recent memories of the namespace waiting for a pass (their own messages
        queued behind this one, or lost): judged with these under the same lease take and
        append, so a backlog is judged in batches however the messages were cut; their own
        messages then find them judged."""
        room = MAX_PASS_MEMORIES - len(todo)
        if self.pending is None or room <= 0:
            return []
        since = self.memory.clock() - PENDING_WINDOW
        mine = set(todo)
        return [(m, p) for m, p in self.pending(namespace, since, room + len(todo)) if m not in mine][:room]

    def judge_with_lease(self, lease: Lease, memory_id: UUID, position: int) -> PassResult:
        """The pass, in one append fenced by ``lease``: the append releases the lease at its
        stream's next version. ``LeaseLost``: the lease was taken over meanwhile and the
        append was refused; nothing of the pass was applied."""
        return self.judge_batch_with_lease(lease, [memory_id], position, None)[0]

    def judge_batch_with_lease(
        self, lease: Lease, memory_ids: list[UUID], position: int, read: dict[UUID, int] | None = None
    ) -> list[PassResult]:
        """The passes of ``memory_ids`` (one namespace's) in one append fenced by ``lease``
        (``LeaseLost``: refused whole). ``read``: the versions of the judgement streams of
        those not judged yet, as just read (the first attempt need not read them again:
        the append is refused if one moved meanwhile)."""
        first = [read]

        def decide(now: datetime, held: Lease) -> Decided[list[PassResult]]:
            versions = first.pop() if first else None
            if versions is None:  # a retry (or no read given): what is judged may have moved
                versions = {m: v for m, (done, v) in self._judged(memory_ids).items() if not done}
            memories = self.memory.streams.memories(versions)
            todo = sorted((memories[m] for m in versions if m in memories), key=_age)
            if any(m.namespace != held.namespace for m in todo):
                raise ValueError("a lease covers the passes of its own namespace's memories only")
            per_memory, read_states = self._decide_all(todo, position, held, now)
            stream_versions = {m.id: m.version for m in read_states}
            stream_versions.update((judgement_stream(m), v) for m, v in versions.items())
            events = [e for m in todo for e in per_memory[m.id]]
            return Decided(
                result=lambda appended: [_result(m, per_memory.get(m, []), appended) for m in memory_ids],
                events=events,
                versions=stream_versions,
            )

        contended = "the memory's neighbours kept changing; the pass will run again"
        return self.leases.run_fenced(self.memory.runner, lease, decide, contended)

    def _decide_all(
        self, todo: list[MemoryState], position: int, lease: Lease, now: datetime
    ) -> tuple[dict[UUID, list[Event]], list[MemoryState]]:
        """Each memory's pass, oldest first, as if each had been appended before the next
        decides (a settlement may retire a neighbour a later memory would judge); and the
        states read, at the versions read."""
        events: dict[UUID, list[Event]] = {
            m.id: [judged_event(m, "not_current", now, lease.token)] for m in todo if not m.is_current(now)
        }
        current = [m for m in todo if m.id not in events]
        if self.judge is None:
            events.update((m.id, [judged_event(m, "judge_unavailable", now, lease.token)]) for m in current)
            return events, todo
        found = self.neighbours.nearest_many([m.id for m in current], NEIGHBOURS_K, MIN_COSINE, position)
        states = self.memory.streams.memories(n for hits in found.values() for n, _ in hits)
        positions = self.neighbours.positions(list({*found, *states}))
        overlay = {**states, **{m.id: m for m in todo}}
        dials: dict[str, ConflictReview] = {}
        in_ledger_order = sorted(current, key=lambda m: (positions.get(m.id, 0), *_age(m)))
        for memory in (overlay[m.id] for m in in_ledger_order):  # as the passes before it left it
            if memory.id not in found:
                events[memory.id] = [judged_event(memory, "unembedded", now, lease.token)]
                continue
            if memory.namespace not in dials:
                dials[memory.namespace] = self.dial_for(memory.namespace)
            earlier = [(n, c) for n, c in found[memory.id] if _earlier(n, memory, positions)]
            pairs = self._pairs(memory, earlier, overlay, now)
            events[memory.id] = (
                decide_pass(
                    memory,
                    pairs,
                    dials[memory.namespace],
                    self.judge.name,
                    lease.token,
                    now,
                    _ids(self.memory.new_id),
                )
                if pairs is not None
                else [judged_event(memory, "judge_unavailable", now, lease.token, self.judge.name)]
            )
            for event in events[memory.id]:
                state = overlay.get(event.stream_id)
                if state is not None:
                    overlay[event.stream_id] = evolve_memory(state, event)
        return events, [*states.values(), *todo]

    def _pairs(
        self,
        memory: MemoryState,
        found: list[tuple[UUID, float]],
        states: dict[UUID, MemoryState],
        now: datetime,
    ) -> list[Pair] | None:
        """The memory judged against each of its current neighbours in ``found``; None when
        the judge is unavailable."""
        assert self.judge is not None
        neighbours = [(states[n], c) for n, c in found if n in states]
        try:
            return [
                Pair(neighbour=n, cosine=c, judgement=self.judge.judge(_statement(n), _statement(memory)))
                for n, c in neighbours
                if n.is_current(now)
            ]
        except JudgeUnavailable as error:
            log.warning("judge %s unavailable: %s", self.judge.name, error)
            return None

    def _judged(self, memory_ids: Sequence[UUID]) -> dict[UUID, tuple[bool, int]]:
        """Whether each memory is judged for good (a later pass only retries an unjudged
        outcome), and its judgement stream's version; one query for them all."""
        streams = {judgement_stream(m): m for m in memory_ids}
        found = dict.fromkeys(memory_ids, (False, 0))
        for stream, head in self.ledger.stream_heads(list(streams)).items():
            if isinstance(head.event, ConflictsJudged):
                found[streams[stream]] = (
                    head.event.outcome in {"judged", "not_current"},
                    head.originator_version,
                )
        return found

    # -- reviewers ------------------------------------------------------------------------------

    def finding(self, finding_id: UUID) -> FindingState | None:
        return fold(self.ledger.streams([finding_id]).get(finding_id, []), evolve_finding)

    def decision(self, decision_id: UUID) -> DecisionState | None:
        return fold(self.ledger.streams([decision_id]).get(decision_id, []), evolve_decision)

    def resolve_finding(self, identity: Identity, command: ResolveFinding) -> FindingResult:
        def decide(now: datetime) -> Decided[FindingResult]:
            finding = self.finding(command.finding_id)
            ids = (finding.memory_a, finding.memory_b) if finding else ()
            memories = self.memory.streams.memories(ids)
            a = memories.get(finding.memory_a) if finding else None
            b = memories.get(finding.memory_b) if finding else None
            events = decide_resolve_finding(command, identity, finding, a, b, now)
            assert finding is not None
            return Decided(
                result=lambda position: FindingResult(
                    finding=_present(self.finding(finding.id)), position=position
                ),
                events=events,
                versions={finding.id: finding.version, **{m.id: m.version for m in memories.values()}},
                note=Note(command.decision, subjects=(finding.id,)),
            )

        retry = Retry("the finding's memories kept changing; retry")
        return self.memory.runner.command(identity, "resolve_finding", decide, retry)

    def overturn(self, identity: Identity, command: OverturnDecision) -> DecisionResult:
        restored_id = self.memory.new_id()
        keys: dict[UUID, NewMemoryKey] = {}
        vectors = Vectors()

        def decide(now: datetime) -> Decided[DecisionResult]:
            decision = self.decision(command.decision_id)
            ids = (decision.winner, decision.loser) if decision else ()
            memories = self.memory.streams.memories(ids)
            winner = memories.get(decision.winner) if decision else None
            loser = memories.get(decision.loser) if decision else None
            events = decide_overturn(command, identity, decision, winner, loser, now, restored_id)
            assert decision is not None
            assert loser is not None
            claims = self._restored_claims(loser)
            events.extend(
                ClaimSet(
                    claim_id=c.id,
                    kind=c.kind,
                    namespace=c.namespace,
                    holders=(*c.holders, restored_id),
                    at=now,
                )
                for c in claims
            )
            if restored_id not in keys:
                keys[restored_id] = self.ledger.new_data_key(restored_id)
            versions = {decision.id: decision.version, **{m.id: m.version for m in memories.values()}}
            versions.update({c.id: c.version for c in claims})
            return Decided(
                result=lambda position: DecisionResult(
                    decision=_present(self.decision(decision.id)), position=position
                ),
                events=self.memory.embedding.embedded(events, vectors),
                versions=versions,
                note=Note("overturned", subjects=(decision.id,)),
                new_keys=list(keys.values()),
            )

        retry = Retry("the decision's memories kept changing; retry")
        return self.memory.runner.command(identity, "overturn_decision", decide, retry)

    def _restored_claims(self, loser: MemoryState) -> list[Claim]:
        """The claims the restored copy joins: its text, and its slot if it has one."""
        claim_ids = self.memory.claim_ids
        wanted: list[tuple[UUID, ClaimKind, str]] = []
        if loser.content is not None:
            wanted.append((claim_ids.text(loser.namespace, loser.content), "text", loser.namespace))
        if loser.subject is not None and loser.attribute is not None:
            slot = claim_ids.slot(loser.namespace, loser.subject, loser.attribute)
            wanted.append((slot, "slot", loser.namespace))
        return list(self.memory.streams.claims(wanted).values())


def _present(state: S | None) -> S:
    """A state just appended to: it is there."""
    assert state is not None
    return state


def _age(memory: MemoryState) -> tuple[datetime, str]:
    return (memory.recorded_at, str(memory.id))


def _earlier(neighbour: UUID, memory: MemoryState, positions: dict[UUID, int]) -> bool:
    """The pass of the memory the ledger holds second judges a pair, unless its write's band
    judged it already. By position, not recorded time: two racing writes may be appended in
    the other order than they were decided, and the pass of the one appended second is the
    one that waits until the index holds the other (docs/architecture.md section 5)."""
    if neighbour in memory.band_judged:
        return False
    return neighbour in positions and memory.id in positions and positions[neighbour] < positions[memory.id]


def _statement(memory: MemoryState) -> Statement:
    return Statement(
        content=memory.content or "", subject=memory.subject, attribute=memory.attribute, value=memory.value
    )


def _ids(new_id: Callable[[], UUID]) -> Iterator[UUID]:
    while True:
        yield new_id()


def _result(memory_id: UUID, events: list[Event], position: int) -> PassResult:
    """What the pass recorded; nothing when an earlier pass had judged the memory."""
    if not events:
        return PassResult(memory_id=memory_id, outcome=None)
    judged = events[0]
    assert isinstance(judged, ConflictsJudged)
    return PassResult(
        memory_id=memory_id,
        outcome=judged.outcome,
        pairs=judged.pairs,
        findings=sum(isinstance(e, FindingOpened) for e in events),
        settled=sum(isinstance(e, ConflictSettled) for e in events),
        position=position,
    )
