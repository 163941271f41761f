"""Every pair judged once, whatever the timing (docs/architecture.md sections 4-5), on real
PostgreSQL + pgvector: two writes that race are judged by the pass of the one the ledger
holds second, which waits until the index holds the first; a pair the write's band judged
is never judged again by the autopilot."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.events import ConflictsJudged, FindingOpened
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import LeaseBusy
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import Settings
from memwarden.projections.listing import ListQuery
from memwarden.workers.main import InProcessAutopilot
from tests.processes import wait_until

ALICE = Identity(namespace="acme/eng/platform", actor="alice", role="agent")
BOB = Identity(namespace="acme/eng/platform", actor="bob", role="agent")
ROOT = Identity(namespace="acme", actor="root", role="owner")

CONTRADICTIONS = [
    ("Build logs are kept for 30 days", "Build logs are kept for 90 days"),
    ("The front desk opens at 8:00 on weekdays", "The front desk opens at 9:30 on weekdays"),
    ("The upload limit for attachments is 25 MB", "The upload limit for attachments is 50 MB"),
    ("The payments team is led by Alice", "The payments team is led by Bob"),
    ("The staging cluster runs Kubernetes 1.29", "The staging cluster runs Kubernetes 1.31"),
    ("Standup starts at 9:15 every morning", "Standup starts at 10:00 every morning"),
    ("The on-call rotation changes every 7 days", "The on-call rotation changes every 14 days"),
    ("The API rate limit is 100 requests per minute", "The API rate limit is 500 requests per minute"),
    ("Database backups run at 02:00 each night", "Database backups run at 04:00 each night"),
    ("The quarterly review is held in room 4", "The quarterly review is held in room 7"),
]


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        rt.core.governance.set_policy(ROOT, ALICE.namespace, PolicyBody(conflict_review="all"))
        yield rt


def write(rt: Runtime, who: Identity, content: str) -> WriteResult:
    result = rt.memory.write(who, WriteMemory(content=content, provenance=ProvenanceClaim()))
    assert result.outcome == "stored", result
    return result


def findings_between(rt: Runtime) -> set[frozenset[UUID]]:
    rt.reads.wait_for(rt.ledger.head_position())
    return {frozenset((f.memory_a, f.memory_b)) for f in rt.reads.findings(ROOT, ListQuery()).items}


def racing(
    rt: Runtime,
    barrier: threading.Barrier,
    results: dict[str, WriteResult],
    who: Identity,
    content: str,
    *,
    judge_at_once: bool = False,
) -> None:
    """Write as soon as the other writer is ready too; ``judge_at_once``: then run the
    memory's own pass, as a worker handed each message the moment it is sent would (it
    may run before the other write is even appended; a busy lease is tried again)."""
    barrier.wait()
    result = results[who.actor] = rt.memory.write(who, WriteMemory(content=content))
    while judge_at_once and result.id is not None:
        try:
            rt.autopilot.judge_memory(result.id, result.position, who.actor)
            return
        except LeaseBusy:
            time.sleep(0.01)


def slow_after_deciding(rt: Runtime, actor: str, pause: float) -> None:
    """The writes of ``actor``'s thread pause ``pause`` s between reading the time they are
    decided at and their append (a process preempted there): two writes released together
    reach the ledger in the other order than their recorded times say."""
    clock = rt.memory.clock

    def read_then_stall() -> datetime:
        now = clock()
        if threading.current_thread().name == actor:
            time.sleep(pause)
        return now

    rt.memory.clock = read_then_stall


def write_racing_pairs(rt: Runtime, *, judge_at_once: bool) -> set[frozenset[UUID]]:
    """Each pair of ``CONTRADICTIONS`` written by Alice and Bob at the same moment, Alice's
    decided first and appended second (``slow_after_deciding``)."""
    slow_after_deciding(rt, ALICE.actor, 0.05)
    pairs: set[frozenset[UUID]] = set()
    for a, b in CONTRADICTIONS:
        results: dict[str, WriteResult] = {}
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(
                name=who.actor,
                target=racing,
                args=(rt, barrier, results, who, content),
                kwargs={"judge_at_once": judge_at_once},
            )
            for who, content in ((ALICE, a), (BOB, b))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        first, second = results["alice"].id, results["bob"].id
        assert first is not None
        assert second is not None
        pairs.add(frozenset((first, second)))
    return pairs


def test_a_pair_decided_first_and_appended_second_is_judged_by_the_later_pass(runtime: Runtime) -> None:
    """Alice's write is decided first but reaches the ledger after Bob's (its recorded time
    is the earlier), and neither write's band saw the other. Bob's pass ran before Alice's
    write was appended; Alice's pass, the later by position, judges the pair."""
    runtime.memory.band = None  # neither write saw the other: the race's window
    start = runtime.memory.clock()
    runtime.memory.clock = lambda: start + timedelta(seconds=1)
    bob = write(runtime, BOB, "Build logs are kept for 90 days")
    assert bob.id is not None
    assert runtime.autopilot.judge_memory(bob.id, bob.position, "w").pairs == 0
    runtime.memory.clock = lambda: start  # decided before Bob's, appended after it
    alice = write(runtime, ALICE, "Build logs are kept for 30 days")
    assert alice.id is not None
    runtime.memory.clock = lambda: start + timedelta(seconds=2)  # Bob's pass released its lease at +1 s
    result = runtime.autopilot.judge_memory(alice.id, alice.position, "w")
    assert (result.outcome, result.pairs, result.findings) == ("judged", 1, 1)
    assert findings_between(runtime) == {frozenset((alice.id, bob.id))}


def test_a_pair_the_band_judged_is_not_judged_again_by_the_autopilot(runtime: Runtime) -> None:
    old = write(runtime, ALICE, "Build logs are kept for 30 days")
    runtime.reads.wait_for(old.position)  # the band of the next write sees it
    new = runtime.memory.write(BOB, WriteMemory(content="Build logs are kept for 90 days"))
    assert new.findings != (), new  # the band opened it, in the write's own append
    assert old.id is not None
    assert new.id is not None
    for memory in (old, new):
        assert memory.id is not None
        runtime.autopilot.judge_memory(memory.id, new.position, "w")
    events = [r.event for r in runtime.ledger.read(0, 10_000)]
    assert sum(isinstance(e, FindingOpened) for e in events) == 1
    judged = {e.memory_id: e for e in events if isinstance(e, ConflictsJudged)}
    assert (judged[new.id].outcome, judged[new.id].pairs) == ("judged", 0)


def test_contradictions_written_concurrently_by_two_agents_are_all_judged(runtime: Runtime) -> None:
    """Ten contradicting pairs, each written by two agents of one namespace at the same
    moment (threads released together), under ``all``: the band and the autopilot, running
    as ``memwarden serve`` runs it without Redis, leave a finding for every pair."""
    autopilot = InProcessAutopilot(runtime)
    autopilot.start()
    try:
        wanted = write_racing_pairs(runtime, judge_at_once=False)
        wait_until(lambda: wanted <= findings_between(runtime), 60)
    finally:
        autopilot.stop()


def test_racing_contradictions_are_all_judged_when_each_pass_runs_at_once(runtime: Runtime) -> None:
    """The same race with each memory's pass run the moment its write returns (a worker
    per message): the pass of the memory appended first may run before the other one is
    appended, and the pair is still judged, once."""
    wanted = write_racing_pairs(runtime, judge_at_once=True)
    assert wanted <= findings_between(runtime)
    assert len(runtime.reads.findings(ROOT, ListQuery()).items) == len(wanted)  # each pair once
