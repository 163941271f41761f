"""The autopilot's batches on real PostgreSQL + pgvector: the dispatcher groups a
namespace's new memories into one message, and one pass judges them under one lease take
and one fenced append exactly as one pass after another would, refused whole once its
lease was taken over."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import ConflictsJudged, LeaseReleased, LeaseTaken, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import LeaseLost
from memwarden.domain.model.policies import PolicyBody
from memwarden.workers import dispatcher as dispatch
from memwarden.workers.actors import run_batch
from memwarden.workers.dispatcher import Dispatcher, MemoryBatch, memory_batches
from tests.integration.test_autopilot import (
    AGENT,
    REVIEWER,
    ROOT,
    runtime,
    worker_1_holds_a_short_lease,
    write,
)

OTHER = Identity(namespace="acme/eng/data", actor="bot", role="agent")
__all__ = ["runtime"]  # the fixture of tests/integration/test_autopilot.py: the band off


def settlements(rt: Runtime, after: int) -> list[tuple[UUID, UUID]]:
    rt.reads.wait_for(rt.ledger.head_position())
    return sorted((d.winner, d.loser) for d in rt.reads.decisions(REVIEWER, after=after).items)


def test_a_batch_judges_each_memory_as_if_the_one_before_had_been_appended(runtime: Runtime) -> None:
    runtime.core.governance.set_policy(ROOT, AGENT.namespace, PolicyBody(conflict_review="auto"))
    m12, _ = write(runtime, AGENT, "The staging cluster has 12 nodes")
    m16, _ = write(runtime, AGENT, "The staging cluster has 16 nodes")
    m20, position = write(runtime, AGENT, "The staging cluster has 20 nodes")
    head = runtime.ledger.head_position()
    results = runtime.autopilot.judge_memories([m20, m12, m16], position, "worker-1")
    assert [r.memory_id for r in results] == [m20, m12, m16]  # in the order asked
    assert [r.outcome for r in results] == ["judged"] * 3
    # m16 closed m12; m20's pass then saw m12 no longer current, and closed m16 only
    # (judged without m16's settlement in view, it would also have settled against m12)
    assert [r.settled for r in results] == [1, 0, 1]
    assert settlements(runtime, head) == sorted([(m16, m12), (m20, m16)])
    appended = [r.event for r in runtime.ledger.read(head, 1000)]
    assert sum(isinstance(e, LeaseTaken) for e in appended) == 1  # one lease take ...
    assert sum(isinstance(e, LeaseReleased) for e in appended) == 1  # ... one fenced append
    assert sum(isinstance(e, ConflictsJudged) for e in appended) == 3
    again = runtime.ledger.head_position()
    assert [r.outcome for r in runtime.autopilot.judge_memories([m12, m16, m20], position, "w2")] == [
        None
    ] * 3
    assert runtime.ledger.head_position() == again  # a redelivery: no lease, nothing appended


def test_a_batch_whose_lease_was_taken_over_is_refused_whole(runtime: Runtime) -> None:
    start, first, _, second, position, lease = worker_1_holds_a_short_lease(runtime)
    runtime.memory.clock = lambda: start + timedelta(seconds=6)  # worker-1 stalls past its expiry
    assert runtime.autopilot.judge_memory(second, position, "worker-2").outcome == "judged"
    head = runtime.ledger.head_position()
    runtime.memory.clock = lambda: start + timedelta(seconds=1)  # worker-1 resumes, believing
    with pytest.raises(LeaseLost):
        runtime.autopilot.judge_batch_with_lease(lease, [first, second], position)
    assert runtime.ledger.head_position() == head  # nothing of the batch: not even `first`
    runtime.memory.clock = lambda: start + timedelta(seconds=7)
    results = runtime.autopilot.judge_memories([first, second], position, "worker-1")
    assert [r.outcome for r in results] == ["judged", None]  # `second` is not judged twice
    judged = [r.event for r in runtime.ledger.read(0, 10_000) if isinstance(r.event, ConflictsJudged)]
    assert sorted(str(e.memory_id) for e in judged if e.memory_id in (first, second)) == sorted(
        [str(first), str(second)]
    )


def test_a_lease_fences_its_own_namespace_only(runtime: Runtime) -> None:
    mine, _ = write(runtime, AGENT, "Standup is at 9:30")
    theirs, position = write(runtime, OTHER, "Standup is at 10:00")
    lease = runtime.autopilot.leases.acquire("autopilot", AGENT.namespace, "worker-1")
    head = runtime.ledger.head_position()
    with pytest.raises(ValueError, match="own namespace"):
        runtime.autopilot.judge_batch_with_lease(lease, [mine, theirs], position)
    # nothing of the failed pass; its lease given back, so the next pass need not wait it out
    after = [r.event for r in runtime.ledger.read(head, 100)]
    assert [type(e).__name__ for e in after] == ["LeaseReleased"]
    released = runtime.autopilot.leases.current("autopilot", AGENT.namespace)
    assert released is not None
    assert released.token == lease.token
    assert not released.live(runtime.memory.clock())  # free at once
    # a message naming two namespaces' memories: each under its own lease
    runtime.memory.clock = lambda: lease.expires_at + timedelta(seconds=1)
    results = runtime.autopilot.judge_memories([mine, theirs], position, "worker-2")
    assert [r.outcome for r in results] == ["judged", "judged"]


def test_the_dispatcher_batches_by_namespace_and_never_skips_an_unsent_memory(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "MAX_MEMORIES_PER_BATCH", 2)
    a1, _ = write(runtime, AGENT, "Payroll runs on Friday")
    b1, p_b1 = write(runtime, OTHER, "The wiki lists the runbooks")
    a2, _ = write(runtime, AGENT, "The deploy freeze starts in December")
    a3, _ = write(runtime, AGENT, "Backups are kept for 30 days")
    b2, _ = write(runtime, OTHER, "The data lake is in eu-west-1")
    sent: list[MemoryBatch] = []
    down = [True]

    def send(batch: MemoryBatch, _first: int) -> None:
        if down[0] and len(sent) == 1:
            raise ConnectionError("redis is down")
        sent.append(batch)

    dispatcher = Dispatcher(runtime.ledger, send, name="batch-test", select=memory_batches)
    dispatcher.register()
    with pytest.raises(ConnectionError):
        dispatcher.dispatch_once()
    assert sent == [MemoryBatch((a1, a2), sent[0].position, sent[0].namespace)]  # a namespace's first two
    assert dispatcher.position() < p_b1  # stopped before b1, the failed batch's first
    down[0] = False
    dispatcher.catch_up()
    assert dispatcher.position() == runtime.ledger.head_position()
    # from b1 on again: b1's batch whole, and a2 once more (a redelivery the pass shrugs off)
    assert [b.memory_ids for b in sent] == [(a1, a2), (b1, b2), (a2, a3)]
    written = {
        r.event.memory_id: r.position
        for r in runtime.ledger.read(0, 10_000)
        if isinstance(r.event, MemoryWritten)
    }
    for batch in sent:  # a batch names the position of its last memory: the read models reach it
        assert batch.position == max(int(written[m] or 0) for m in batch.memory_ids)


@pytest.mark.parametrize(("ids", "position"), [("x", 1), ([], 1), (["nope"], 1), ([str(UUID(int=1))], "x")])
def test_a_damaged_batch_message_is_dropped(runtime: Runtime, ids: object, position: object) -> None:
    head = runtime.ledger.head_position()
    assert run_batch(runtime.autopilot, "worker-1", ids, position) is None
    assert runtime.ledger.head_position() == head


def test_a_pass_takes_along_the_recent_memories_of_its_namespace_still_waiting(runtime: Runtime) -> None:
    first, _ = write(runtime, AGENT, "Standup is at 9:30")
    second, _ = write(runtime, AGENT, "Standup is at 10:00")
    elsewhere, _ = write(runtime, OTHER, "Standup is at 11:00")
    third, position = write(runtime, AGENT, "Payroll runs on Friday")
    runtime.reads.wait_for(position)
    head = runtime.ledger.head_position()
    (result,) = runtime.autopilot.judge_memories([first], position, "worker-1", take_along=True)
    assert result.memory_id == first
    appended = [r.event for r in runtime.ledger.read(head, 1000)]
    judged = {e.memory_id: e for e in appended if isinstance(e, ConflictsJudged)}
    assert set(judged) == {first, second, third}  # not `elsewhere`: another namespace's lease
    assert judged[second].pairs == 1  # second judged against first, as its own pass would
    assert sum(isinstance(e, LeaseTaken) for e in appended) == 1
    after = runtime.ledger.head_position()
    assert runtime.autopilot.judge_memories([second, third], position, "worker-2")[0].outcome is None
    assert runtime.ledger.head_position() == after  # their own messages find them judged
    # only recent memories are taken along: an old one waits for its own message (or the sweep)
    now = runtime.memory.clock()
    runtime.memory.clock = lambda: now + timedelta(minutes=3)
    fresh, at = write(runtime, OTHER, "The wiki lists the runbooks")
    runtime.reads.wait_for(at)
    mark = runtime.ledger.head_position()
    (own,) = runtime.autopilot.judge_memories([fresh], at, "worker-1", take_along=True)
    assert own.outcome == "judged"
    later = [r.event for r in runtime.ledger.read(mark, 1000) if isinstance(r.event, ConflictsJudged)]
    assert elsewhere not in [e.memory_id for e in later]  # three minutes older: not taken along
    assert [e.memory_id for e in later] == [fresh]
