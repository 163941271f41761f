"""The conflict autopilot as a plain service on real PostgreSQL + pgvector and the offline
embedder: findings under ``lower_trust`` and ``all``, settlements under ``auto`` and their
reversal, idempotent redelivery, leases with fencing tokens, ``judge_unavailable``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import NamedTuple
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.autopilot import OverturnDecision, ResolveFinding
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.errors import Forbidden, InvalidState, NotFound
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.judging import RulesJudge
from memwarden.domain.model.leases import Lease, LeaseBusy, LeaseLost
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.leases import Leases
from memwarden.domain.settings import Settings
from memwarden.projections.governance.views import AuditFilter
from memwarden.workers.dispatcher import Sweeper

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent")
ORG = Identity(namespace="acme", actor="lead", role="member")
REVIEWER = Identity(namespace="acme/eng", actor="rev", role="admin")
OUTSIDER = Identity(namespace="acme/sales", actor="rev2", role="admin")
ROOT = Identity(namespace="acme", actor="root", role="owner")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        # The autopilot's own pairs: without this, the synchronous band of the write
        # (tests/integration/test_synchronous_band.py) settles those it already sees.
        rt.memory.band = None
        yield rt


def write(rt: Runtime, who: Identity, content: str, source: str = "conversation") -> tuple[UUID, int]:
    result = rt.memory.write(who, WriteMemory(content=content, provenance=ProvenanceClaim(source=source)))
    assert result.outcome == "stored", result
    assert result.id is not None
    return result.id, result.position


def judge(rt: Runtime, memory_id: UUID, position: int, holder: str = "worker-1") -> object:
    return rt.autopilot.judge_memory(memory_id, position, holder)


def set_dial(rt: Runtime, namespace: str, dial: str) -> None:
    rt.core.governance.set_policy(ROOT, namespace, PolicyBody(conflict_review=dial))  # type: ignore[arg-type]


def test_an_equal_rank_contradiction_is_a_finding_under_lower_trust_and_is_resolved(runtime: Runtime) -> None:
    old, p1 = write(runtime, AGENT, "Standup is at 9:30")
    new, p2 = write(runtime, AGENT, "Standup is at 10:00")
    first = judge(runtime, old, p1)
    assert first.outcome == "judged"
    assert first.pairs == 0
    result = runtime.autopilot.judge_memory(new, p2, "worker-1")
    assert (result.outcome, result.pairs, result.findings, result.settled) == ("judged", 1, 1, 0)
    head = runtime.ledger.head_position()
    again = runtime.autopilot.judge_memory(new, p2, "worker-2")  # a redelivery changes nothing
    assert again.outcome is None
    assert runtime.ledger.head_position() == head

    findings = runtime.reads.findings(REVIEWER, after=head).items
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.memory_a, finding.memory_b, finding.rule) == (old, new, "frame")
    assert "9:30" not in finding.explanation
    assert runtime.reads.autopilot_counts(AGENT, after=head).open_findings == 1
    assert runtime.reads.autopilot_counts(REVIEWER, after=head).open_findings == 1
    assert runtime.reads.autopilot_counts(OUTSIDER, after=head).open_findings == 0  # a sibling subtree

    with pytest.raises(NotFound):
        runtime.autopilot.resolve_finding(OUTSIDER, ResolveFinding(finding_id=finding.id, decision="keep_b"))
    with pytest.raises(Forbidden):
        runtime.autopilot.resolve_finding(
            Identity(namespace="acme/eng", actor="x", role="agent"),
            ResolveFinding(finding_id=finding.id, decision="keep_b"),
        )
    resolved = runtime.autopilot.resolve_finding(
        REVIEWER, ResolveFinding(finding_id=finding.id, decision="keep_b")
    )
    assert resolved.finding.status == "resolved"
    assert resolved.finding.decision == "keep_b"
    assert runtime.memory.memory(old).status == "retired"  # type: ignore[union-attr]
    assert runtime.memory.memory(new).status == "active"  # type: ignore[union-attr]
    with pytest.raises(InvalidState):
        runtime.autopilot.resolve_finding(REVIEWER, ResolveFinding(finding_id=finding.id, decision="dismiss"))
    ops = [r.op for r in runtime.reads.audit("acme", _all()) if r.op == "resolve_finding"]
    assert ops.count("resolve_finding") == 4  # three refusals and the resolution, all audited


def _all() -> AuditFilter:
    return AuditFilter()


def test_under_auto_the_newer_equal_rank_memory_wins_and_a_reviewer_overturns_it(runtime: Runtime) -> None:
    set_dial(runtime, "acme/eng/platform", "auto")
    old, _ = write(runtime, AGENT, "The staging cluster has 12 nodes")
    new, position = write(runtime, AGENT, "The staging cluster has 16 nodes")
    result = runtime.autopilot.judge_memory(new, position, "worker-1")
    assert (result.findings, result.settled) == (0, 1)
    # the newer fact starts later: a succession (the old one's validity closes)
    superseded = runtime.memory.memory(old)
    assert superseded is not None
    assert not superseded.is_current(runtime.memory.clock())
    steps = runtime.reads.history(REVIEWER, new, after=result.position)
    assert steps is not None
    assert any(s.reason == "autopilot" for s in steps)
    decisions = runtime.reads.decisions(REVIEWER, after=result.position).items
    assert [(d.winner, d.loser, d.status, d.dial) for d in decisions] == [(new, old, "settled", "auto")]

    overturned = runtime.autopilot.overturn(
        REVIEWER, OverturnDecision(decision_id=decisions[0].id, reason="wrong")
    )
    restored = overturned.decision.restored
    assert overturned.decision.status == "overturned"
    assert restored is not None
    assert runtime.memory.memory(new).status == "retired"  # type: ignore[union-attr]
    copy = runtime.memory.memory(restored)
    assert copy is not None
    assert copy.status == "active"
    assert copy.content == "The staging cluster has 12 nodes"
    with pytest.raises(InvalidState):
        runtime.autopilot.overturn(REVIEWER, OverturnDecision(decision_id=decisions[0].id))
    listed = runtime.reads.decisions(REVIEWER, after=overturned.position).items
    assert [d.status for d in listed] == ["overturned"]
    # the restored fact is findable again, and an identical write dedupes against it
    again = runtime.memory.write(AGENT, WriteMemory(content="The staging cluster has 12 nodes"))
    assert again.outcome == "deduplicated"
    assert again.id == restored


def test_under_lower_trust_a_higher_rank_new_memory_settles_automatically(runtime: Runtime) -> None:
    member = Identity(namespace="acme/eng/platform", actor="dana", role="member")
    old, _ = write(runtime, AGENT, "Payroll runs on Friday")
    new, position = write(runtime, member, "Payroll runs on Thursday", source="manual")
    result = runtime.autopilot.judge_memory(new, position, "worker-1")
    assert (result.findings, result.settled) == (0, 1)
    superseded = runtime.memory.memory(old)
    assert superseded is not None
    assert not superseded.is_current(runtime.memory.clock())


def test_all_makes_every_contradiction_a_finding_and_another_subject_is_none(runtime: Runtime) -> None:
    set_dial(runtime, "acme/eng/platform", "all")
    member = Identity(namespace="acme/eng/platform", actor="dana", role="member")
    write(runtime, AGENT, "The rotation of team 1 changes on Tuesday")
    other, p_other = write(runtime, AGENT, "The rotation of team 2 changes on Tuesday")
    assert runtime.autopilot.judge_memory(other, p_other, "w").findings == 0  # type: ignore[union-attr]
    write(runtime, AGENT, "Payroll runs on Friday")
    new, position = write(runtime, member, "Payroll runs on Thursday", source="manual")
    result = runtime.autopilot.judge_memory(new, position, "w")
    assert (result.findings, result.settled) == (1, 0)


def test_an_ancestor_memory_is_never_settled_from_below(runtime: Runtime) -> None:
    set_dial(runtime, "acme/eng/platform", "auto")
    org, _ = write(runtime, ORG, "The staging cluster has 12 nodes")
    new, position = write(runtime, AGENT, "The staging cluster has 16 nodes")
    result = runtime.autopilot.judge_memory(new, position, "w")
    assert (result.findings, result.settled) == (1, 0)
    assert runtime.memory.memory(org).status == "active"  # type: ignore[union-attr]
    finding = runtime.reads.findings(ROOT, after=result.position).items[0]
    with pytest.raises(Forbidden):  # the platform reviewer cannot retire the org's fact
        runtime.autopilot.resolve_finding(
            Identity(namespace="acme/eng/platform", actor="r", role="admin"),
            ResolveFinding(finding_id=finding.id, decision="keep_b"),
        )


def test_without_a_judge_the_memory_stays_unjudged_and_is_counted(runtime: Runtime) -> None:
    runtime.autopilot.judge = None
    memory_id, position = write(runtime, AGENT, "Standup is at 9:30")
    assert runtime.reads.autopilot_counts(AGENT, after=position).unjudged == 1
    result = runtime.autopilot.judge_memory(memory_id, position, "w")
    assert result.outcome == "judge_unavailable"
    assert runtime.reads.autopilot_counts(AGENT, after=result.position).unjudged == 1
    runtime.autopilot.judge = RulesJudge()  # the judge is back: the memory is judged now
    later = runtime.autopilot.judge_memory(memory_id, position, "w")
    assert later.outcome == "judged"
    assert runtime.reads.autopilot_counts(AGENT, after=later.position).unjudged == 0


class Stalled(NamedTuple):
    start: datetime
    first: UUID
    p1: int
    second: UUID
    p2: int
    lease: Lease


def worker_1_holds_a_short_lease(runtime: Runtime) -> Stalled:
    """Leases of 5 s on the runtime's clock (late-bound: a test moves it), three memories
    of one namespace, and worker-1 holding their namespace's lease."""
    start = runtime.memory.clock()
    late_clock = lambda: runtime.memory.clock()  # noqa: E731, PLW0108 - late-bound: the test moves the clock
    runtime.autopilot.leases = Leases(runtime.ledger, late_clock, ttl=timedelta(seconds=5))
    write(runtime, AGENT, "Standup is at 9:30")
    first, p1 = write(runtime, AGENT, "Standup is at 10:00")
    second, p2 = write(runtime, AGENT, "Standup is at 11:00")
    lease = runtime.autopilot.leases.acquire("autopilot", AGENT.namespace, "worker-1")
    return Stalled(start, first, p1, second, p2, lease)


def test_a_pass_whose_lease_was_taken_over_cannot_append(runtime: Runtime) -> None:
    clock = runtime.memory.clock
    start, first, p1, second, p2, lease = worker_1_holds_a_short_lease(runtime)
    assert lease.token == 1
    for holder in ("worker-2", "worker-1"):  # one pass at a time, its own holder's too
        with pytest.raises(LeaseBusy):
            runtime.autopilot.leases.acquire("autopilot", AGENT.namespace, holder)
    runtime.memory.clock = lambda: start + timedelta(seconds=6)  # worker-1 stalls past its expiry
    taken = runtime.autopilot.judge_memory(second, p2, "worker-2")  # takes over with token 2
    assert taken.outcome == "judged"
    head = runtime.ledger.head_position()
    # worker-1 resumes, its clock still believing in the lease: the append is refused whole
    runtime.memory.clock = lambda: start + timedelta(seconds=1)
    with pytest.raises(LeaseLost):
        runtime.autopilot.judge_with_lease(lease, first, p1)
    assert runtime.ledger.head_position() == head
    runtime.reads.wait_for(head)
    assert runtime.reads.worker_gauges().lease_takeovers == 1
    # the lease was released by worker-2's pass: the next pass takes it (token 3), no takeover
    runtime.memory.clock = lambda: start + timedelta(seconds=7)
    assert runtime.autopilot.judge_memory(first, p1, "worker-1").outcome == "judged"
    runtime.memory.clock = clock
    assert runtime.autopilot.leases.current("autopilot", AGENT.namespace).token == 3  # type: ignore[union-attr]
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert runtime.reads.worker_gauges().lease_takeovers == 1


def test_the_sweep_hands_back_what_no_pass_judged_once_it_waited(runtime: Runtime) -> None:
    runtime.autopilot.judge = None
    memory_id, position = write(runtime, AGENT, "Standup is at 9:30")
    assert runtime.autopilot.judge_memory(memory_id, position, "w").outcome == "judge_unavailable"
    runtime.autopilot.judge = RulesJudge()  # the judge is back
    now = runtime.memory.clock()
    sent: list[tuple[UUID, int]] = []

    def send(memory: UUID, at: int) -> None:
        sent.append((memory, at))
        runtime.autopilot.judge_memory(memory, at, "sweeper")

    runtime.reads.wait_for(runtime.ledger.head_position())
    sweeper = Sweeper(runtime.reads.unjudged_memories, send, lambda: now, every=60)
    assert sweeper.sweep_once() == 0  # not waited long enough yet
    sweeper.clock = lambda: now + timedelta(seconds=61)
    assert sweeper.sweep_once() == 1
    assert [m for m, _ in sent] == [memory_id]
    assert 0 < sent[0][1] <= position  # the memory's own event: the index has it once past there
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert sweeper.sweep_once() == 0  # judged now: nothing to hand back
    assert runtime.reads.autopilot_counts(AGENT).unjudged == 0
