"""The conflict autopilot's rules (docs/architecture.md section 5): a memory's pass, findings and
automatic settlements, and a reviewer's answer to each. Pure: states, a judgement, the
namespace's dial, ``now`` and ids in; events out.

The pass over memory M judges each of its nearest current neighbours that the ledger
holds before M (an earlier position) once, except those its write's synchronous band
judged already (``MemoryState.band_judged``). The pass waits until the index holds M, so it
sees every one of them, whatever the moment each was written: every pair is judged exactly
once, by the band or by the pass of the later memory. A contradiction is settled by the
``conflict_review`` dial of M's namespace (domain/model/settling.py):

- ``auto``: the higher rank wins, equal rank -> the newer (M);
- ``lower_trust``: automatic only when M outranks the neighbour, else a finding;
- ``all``: always a finding.

A neighbour in another namespace (an ancestor's, or one shared in) is never settled
automatically: a pass never closes a memory outside the namespace it was written in, as
the write path never does (section 4, step 6). It becomes a finding.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated, Literal
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec
from msgspec.structs import replace

from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import (
    ConflictReview,
    ConflictSettled,
    ConflictsJudged,
    Event,
    FindingDecision,
    FindingOpened,
    FindingResolved,
    JudgedOutcome,
    MemoryRetired,
    MemoryWritten,
    SettlementOverturned,
)
from memwarden.domain.model.identity import REVIEWER_ROLES, Identity
from memwarden.domain.model.lifecycle import Lifecycle
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.namespaces import is_within
from memwarden.domain.model.settling import Pair, conflict_settled, finding_opened, settlement
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.write import supersede

AUTOPILOT = "autopilot"
"""The pass's name (its leases) and the supersedence reason of its settlements."""
NEIGHBOURS_K = 8
MIN_COSINE = 0.6
SUPERSEDE_MIN_COSINE = 0.75
"""The synchronous band of a write (section 4, step 7): own-namespace neighbours this
similar are judged inside the write."""


def judgement_stream(memory_id: UUID) -> UUID:
    """The stream of a memory's ``ConflictsJudged``: its version 1 is taken once."""
    return uuid5(NAMESPACE_URL, f"memwarden:judged:{memory_id}")


def judged_event(
    memory: MemoryState, outcome: JudgedOutcome, now: datetime, token: int, judge: str | None = None
) -> ConflictsJudged:
    return ConflictsJudged(
        judgement_id=judgement_stream(memory.id),
        memory_id=memory.id,
        namespace=memory.namespace,
        outcome=outcome,
        judge=judge,
        token=token,
        at=now,
    )


def decide_pass(
    memory: MemoryState,
    pairs: list[Pair],
    dial: ConflictReview,
    judge: str,
    token: int,
    now: datetime,
    ids: Iterator[UUID],
) -> list[Event]:
    """The events of one memory's pass: its ``ConflictsJudged``, then a settlement or a
    finding per contradiction (most similar first). Once a settlement retires the memory
    itself, its remaining contradictions are moot: it is no longer current."""
    events: list[Event] = []
    current = memory
    contradictions = 0
    for pair in sorted(pairs, key=lambda p: (-p.cosine, str(p.neighbour.id))):
        if not pair.judgement.contradicts:
            continue
        contradictions += 1
        old = pair.neighbour
        if not current.is_current(now) or not old.is_current(now):
            continue
        settled = settlement(dial, current.rank, old, current.namespace == old.namespace)
        if settled == "finding":
            events.append(finding_opened(current.namespace, current.id, pair, judge, now, next(ids)))
            continue
        winner, loser = (current, old) if settled == "newer" else (old, current)
        superseded = supersede(loser, winner.id, winner.valid_from, AUTOPILOT, now)
        events.append(superseded)
        events.append(
            conflict_settled(current.namespace, winner.id, loser.id, pair, judge, dial, now, next(ids))
        )
        if loser.id == current.id and superseded.kind == "correction":
            current = replace(current, status="retired", retired_at=now)
    judged = judged_event(memory, "judged", now, token, judge)
    return [replace(judged, pairs=len(pairs), contradictions=contradictions), *events]


# -- findings ------------------------------------------------------------------------------

FindingStatus = Literal["open", "resolved"]


def finding_group(opened: FindingOpened) -> UUID:
    """The group a finding is listed under: its newer statement (``memory_b``, whose pass
    found the pair). A statement that contradicts many older ones, as one bad import line
    does, is one group for a reviewer instead of one row per pair."""
    return opened.memory_b


class FindingState(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_a: UUID
    memory_b: UUID
    judge: str
    rule: str
    explanation: str
    cosine: float
    group_id: UUID
    """``finding_group``: the findings about one newer statement share it."""
    opened_at: datetime
    status: FindingStatus = "open"
    decision: FindingDecision | None = None
    reviewer: str | None = None
    resolved_at: datetime | None = None
    version: int = 0


def _finding_opened(event: FindingOpened) -> FindingState:
    return FindingState(
        id=event.finding_id,
        namespace=event.namespace,
        memory_a=event.memory_a,
        memory_b=event.memory_b,
        judge=event.judge,
        rule=event.rule,
        explanation=event.explanation,
        cosine=event.cosine,
        group_id=finding_group(event),
        opened_at=event.at,
    )


def _finding_resolved(state: FindingState, event: FindingResolved) -> FindingState:
    return replace(
        state, status="resolved", decision=event.decision, reviewer=event.reviewer, resolved_at=event.at
    )


evolve_finding = Lifecycle("finding", FindingOpened, _finding_opened, FindingResolved, _finding_resolved)


Reason = Annotated[str, msgspec.Meta(min_length=1, max_length=1000)]
"""A reviewer's reason for a ruling: said, and short (the wire refuses any other)."""


class ResolveFinding(msgspec.Struct, frozen=True, kw_only=True):
    finding_id: UUID
    decision: FindingDecision
    reason: Reason | None = None


def check_reviewer(reviewer: Identity, namespace: str | None, what: str) -> None:
    if namespace is None or not is_within(namespace, reviewer.namespace):
        raise NotFound(f"no such {what}")
    if reviewer.role not in REVIEWER_ROLES:
        raise Forbidden(f"role {reviewer.role!r} may not review {what}s")


def decide_resolve_finding(
    command: ResolveFinding,
    reviewer: Identity,
    finding: FindingState | None,
    a: MemoryState | None,
    b: MemoryState | None,
    now: datetime,
) -> list[Event]:
    """``keep_a`` retires B, ``keep_b`` retires A; ``both_valid`` and ``dismiss`` change no
    memory. The memory retired must be current and inside the reviewer's subtree (a team's
    reviewer cannot retire an org fact it can read)."""
    check_reviewer(reviewer, finding.namespace if finding else None, "finding")
    assert finding is not None
    check_storable(command)
    if finding.status != "open":
        raise InvalidState(f"finding already resolved ({finding.decision})")
    resolved = FindingResolved(
        finding_id=finding.id,
        decision=command.decision,
        reviewer=reviewer.actor,
        reason=command.reason,
        at=now,
    )
    if command.decision in {"both_valid", "dismiss"}:
        return [resolved]
    kept, retired = (a, b) if command.decision == "keep_a" else (b, a)
    if kept is None or retired is None or not retired.is_current(now):
        raise InvalidState("the memory to retire is no longer current")
    if not is_within(retired.namespace, reviewer.namespace):
        raise Forbidden("the memory to retire lives outside your subtree")
    retirement = MemoryRetired(
        memory_id=retired.id, reason=f"finding:{command.decision}", kept=kept.id, at=now
    )
    return [retirement, resolved]


# -- automatic settlements and their reversal ---------------------------------------------

DecisionStatus = Literal["settled", "overturned"]


class DecisionState(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    winner: UUID
    loser: UUID
    judge: str
    rule: str
    explanation: str
    dial: ConflictReview
    settled_at: datetime
    status: DecisionStatus = "settled"
    reviewer: str | None = None
    restored: UUID | None = None
    overturned_at: datetime | None = None
    version: int = 0


def _settled(event: ConflictSettled) -> DecisionState:
    return DecisionState(
        id=event.decision_id,
        namespace=event.namespace,
        winner=event.winner,
        loser=event.loser,
        judge=event.judge,
        rule=event.rule,
        explanation=event.explanation,
        dial=event.dial,
        settled_at=event.at,
    )


def _overturned(state: DecisionState, event: SettlementOverturned) -> DecisionState:
    return replace(
        state, status="overturned", reviewer=event.reviewer, restored=event.restored, overturned_at=event.at
    )


evolve_decision = Lifecycle("settlement", ConflictSettled, _settled, SettlementOverturned, _overturned)


class OverturnDecision(msgspec.Struct, frozen=True, kw_only=True):
    decision_id: UUID
    reason: Reason | None = None


def decide_overturn(
    command: OverturnDecision,
    reviewer: Identity,
    decision: DecisionState | None,
    winner: MemoryState | None,
    loser: MemoryState | None,
    now: datetime,
    restored_id: UUID,
) -> list[Event]:
    """Reverse a settlement: the loser's fact is written again (``restored``, its content,
    slot and provenance, reason ``overturn``) and supersedes the winner, if still current.
    The ledger is never rewritten: the loser stays retired, its copy takes its place."""
    check_reviewer(reviewer, decision.namespace if decision else None, "decision")
    assert decision is not None
    check_storable(command)
    if decision.status != "settled":
        raise InvalidState("decision already overturned")
    if loser is None or winner is None or loser.status == "erased" or loser.content is None:
        raise InvalidState("the settled memories are no longer available")
    if command.reason is not None and not command.reason.strip():
        raise InvalidRequest("reason must not be blank")
    restored = MemoryWritten(
        memory_id=restored_id,
        namespace=loser.namespace,
        actor=reviewer.actor,
        type=loser.type,
        scope=loser.scope,
        content=loser.content,
        value=loser.value,
        subject=loser.subject,
        attribute=loser.attribute,
        tags=loser.tags,
        selectors=loser.selectors,
        provenance=loser.provenance,
        event_time=loser.event_time,
        valid_from=loser.valid_from,
        status="active",
        trust_tier="canonical",
        supersedes=(loser.id, winner.id),
        classification=loser.classification,
        reason="overturn",
        at=now,
    )
    events: list[Event] = [restored]
    if winner.is_current(now):
        events.append(supersede(winner, restored_id, loser.valid_from, "overturn", now))
    events.append(
        SettlementOverturned(
            decision_id=decision.id,
            reviewer=reviewer.actor,
            restored=restored_id,
            reason=command.reason,
            at=now,
        )
    )
    return events
