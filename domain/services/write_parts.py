"""The parts of a write as the write service decides them: each call's writes (``Write``),
each fact of a write with the claims it touches (``Item``), decided one after another against
the state the earlier ones leave, and the one audit note of the call."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.commands import WriteMemory, WritePolicy
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    Event,
    MemoryReaffirmed,
    MemorySuperseded,
    MemoryWritten,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import Claim, MemoryState, evolve_claim, evolve_memory
from memwarden.domain.model.write import Outcome, Rejection, WriteDecision, WriteState, decide_write
from memwarden.domain.services.band import Banded
from memwarden.domain.services.commands import Note
from memwarden.domain.services.vectors import Vectors
from memwarden.domain.services.write_results import (
    EMBEDDING_UNAVAILABLE,
    Split,
    WriteResult,
    capped,
    write_result,
)


class Write:
    """One write of a call: its command, how it is taken (``split``), its items and, once
    decided, one decision per item. ``refusal``: refused before any decision."""

    def __init__(self, command: WriteMemory | None, split: Split, items: list[Item]) -> None:
        self.command = command
        self.split = split
        self.items = items
        self.decisions: list[WriteDecision] = []
        self.refusal: Rejection | None = None

    @classmethod
    def refused(cls, rejection: Rejection) -> Write:
        write = cls(None, Split(commands=(), verbatim_reason=None), [])
        write.refusal = rejection
        return write

    @property
    def all_rejected(self) -> bool:
        return all(d.outcome == "rejected" for d in self.decisions)

    @property
    def outcome(self) -> Outcome:
        return "rejected" if self.refusal is not None else self.decisions[0].outcome

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        return (self.refusal,) if self.refusal is not None else self.decisions[0].rejected

    def result(self, position: int) -> WriteResult:
        if self.refusal is not None:
            return WriteResult(outcome="rejected", id=None, position=position, rejected=(self.refusal,))
        return write_result(self.decisions, self.split, position)


class Item:
    """One command of a write (the content, or one extracted fact) and its claims."""

    def __init__(
        self,
        command: WriteMemory,
        memory_id: UUID,
        dispute_id: UUID,
        wanted: list[tuple[UUID, ClaimKind, str]],
        banded: Banded | None = None,
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.command = command
        self.memory_id = memory_id
        self.dispute_id = dispute_id
        self.wanted = wanted
        self.banded = banded or Banded()
        self.new_id = new_id

    @property
    def text_claim_id(self) -> UUID:
        return self.wanted[0][0]

    def decide(
        self,
        identity: Identity,
        claims: dict[UUID, Claim],
        holders: dict[UUID, MemoryState],
        policy: WritePolicy,
        now: datetime,
    ) -> WriteDecision:
        def claim(kind: ClaimKind) -> Claim | None:
            return next((claims[c] for c, k, _ in self.wanted if k == kind), None)

        state = WriteState(
            text_claim=claims[self.text_claim_id],
            slot_claim=claim("slot"),
            source_ref_claim=claim("source_ref"),
            holders=holders,
            judged=tuple(  # each neighbour as it is now (its text claim was read with the write's)
                msgspec.structs.replace(p, neighbour=holders[p.neighbour.id])
                for p in self.banded.contradicted
                if p.neighbour.id in holders
            ),
            band_judged=self.banded.judged,
            judge=self.banded.judge,
        )
        review_ids = iter([self.new_id() for _ in state.judged])
        return decide_write(
            self.command, identity, state, policy, now, self.memory_id, self.dispute_id, review_ids
        )


class Absent:
    """The claim ids a write guesses are new (not looked up); forgotten after a conflict."""

    def __init__(self, ids: frozenset[UUID]) -> None:
        self.ids = ids

    def clear(self) -> None:
        self.ids = frozenset()


def decide_in_order(
    identity: Identity,
    writes: Sequence[Write],
    claims: dict[UUID, Claim],
    holders: dict[UUID, MemoryState],
    policy: WritePolicy,
    now: datetime,
    *,
    strict: bool,
) -> None:
    """Decide each item against the state its predecessors leave (folded into ``claims``
    and ``holders``), so two items of one call meet as two writes one after the other."""
    for write in writes:
        write.decisions = []
        for item in write.items:
            try:
                decision = item.decide(identity, claims, holders, policy, now)
            except DomainError as error:
                if strict:
                    raise
                decision = WriteDecision(outcome="rejected", rejected=(Rejection(error.code, error.detail),))
            write.decisions.append(decision)
            fold_into(decision.events, claims, holders)


def fold_into(events: Iterable[Event], claims: dict[UUID, Claim], holders: dict[UUID, MemoryState]) -> None:
    for event in events:
        if isinstance(event, ClaimSet):
            claims[event.claim_id] = evolve_claim(claims.get(event.claim_id), event)
        elif isinstance(event, MemoryWritten | MemorySuperseded | MemoryReaffirmed):
            holders[event.memory_id] = evolve_memory(holders.get(event.memory_id), event)


def writes_memory(decision: WriteDecision) -> bool:
    return any(isinstance(e, MemoryWritten) for e in decision.events)


def write_note(writes: Sequence[Write], unembedded: bool) -> Note:
    """One record for the whole write: every fact's outcome, how the content was taken
    (extracted, or verbatim and why), and every memory it names."""
    (write,) = writes
    decisions = write.decisions
    outcomes = ", ".join(outcome_detail(d) for d in decisions)
    if write.split.extracted:
        detail = f"extracted=true, {len(decisions)} facts: {outcomes}"
    else:
        detail = f"extracted=false ({write.split.verbatim_reason}): {outcomes}"
    return named_note(writes, detail, unembedded)


def batch_note(writes: Sequence[Write], unembedded: bool) -> Note:
    """One record for the batch, as for every syscall: the items' outcomes counted, the
    rejected ones by index and first reason, and every memory the batch names."""
    counts = Counter(w.outcome for w in writes)
    detail = f"{len(writes)} items: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    rejected = [f"#{i} {w.rejections[0].reason}" for i, w in enumerate(writes) if w.outcome == "rejected"]
    if rejected:
        detail += "; rejected " + ", ".join(rejected)
    return named_note(writes, detail, unembedded)


def named_note(writes: Sequence[Write], detail: str, unembedded: bool) -> Note:
    """Denied when nothing was taken; names every memory the writes decided on."""
    if unembedded:
        detail += "; " + EMBEDDING_UNAVAILABLE
    rejected = all(w.all_rejected for w in writes)
    subjects = tuple(
        dict.fromkeys(d.memory_id for w in writes for d in w.decisions if d.memory_id is not None)
    )
    return Note(detail, "denied" if rejected else "ok", subjects)


def outcome_detail(decision: WriteDecision) -> str:
    cap = capped(decision)
    # sources are names from the trust lattice, never caller text: safe in an audit record
    detail = (
        decision.outcome
        if cap is None
        else f"{decision.outcome} (provenance {cap.claimed} capped to {cap.applied})"
    )
    if decision.findings or decision.decisions:  # the band's, by the namespace's dial
        detail += f" (band: {len(decision.decisions)} settled, {len(decision.findings)} findings)"
    if not decision.rejected:
        return detail
    return detail + ": " + ", ".join(r.reason for r in decision.rejected)


Bands = dict[tuple[str, str | None], Banded]
"""The synchronous band of a write's facts, by what the judge reads of a fact (``band_key``)."""


def band_key(fact: WriteMemory) -> tuple[str, str | None]:
    return fact.content, fact.value


def band_vectors(writes: Sequence[Write]) -> Vectors:
    """The vectors the synchronous band already computed, by text: sealed as they are (those
    of the first one's model: a batch's items may have been embedded apart)."""
    items = [item for w in writes for item in w.items if item.banded.vector is not None]
    vectors = Vectors(model=items[0].banded.model if items else None)
    vectors.update(
        (item.command.content, item.banded.vector) for item in items if item.banded.model == vectors.model
    )
    return vectors
