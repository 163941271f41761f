"""The periodic checkpoint pass: a signed checkpoint once N events or M seconds (with
something appended) passed, kept on the ledger, under a lease, made once; by the Dramatiq
actor of `memwarden worker` and by the in-process loop of `memwarden serve`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from bootstrap.runtime import Runtime
from domain.model.checkpoints import CHECKPOINTS, LEDGER_SCOPE
from domain.model.commands import WriteMemory
from domain.model.identity import Identity
from domain.model.leases import LeaseBusy, LeaseLost
from domain.services.checkpoints import RecordedCheckpoint
from domain.settings import Settings
from tests.processes import eventually
from workers.actors import run_checkpoint
from workers.main import InProcessAutopilot, WorkerProcess

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    tuned = msgspec.structs.replace(settings, checkpoint_every_events=20, checkpoint_every_seconds=300)
    with Runtime(tuned, follow=False) as rt:
        yield rt


def write(runtime: Runtime, n: int, prefix: str = "fact") -> None:
    for i in range(n):
        runtime.memory.write(
            AGENT, WriteMemory(content=f"{prefix} number {i}: the build cache lives in bucket {i}")
        )


def at(runtime: Runtime, now: datetime) -> None:
    runtime.memory.clock = lambda: now


def test_the_first_checkpoint_verifies_and_is_not_made_again(runtime: Runtime) -> None:
    write(runtime, 2)
    made = runtime.checkpoints.periodic("worker-1")
    assert made is not None
    assert made.by == "periodic"
    assert made.checkpoint.position < runtime.ledger.head_position()
    assert runtime.ledger.verify(made.checkpoint).ok
    head = runtime.ledger.head_position()
    assert runtime.checkpoints.periodic("worker-1") is None  # a redelivery: nothing more
    assert runtime.checkpoints.periodic("worker-2") is None
    assert runtime.ledger.head_position() == head  # not even a lease was taken
    assert [c.checkpoint for c in runtime.checkpoints.page(10)] == [made.checkpoint]


def test_every_n_events_brings_the_next_one(runtime: Runtime) -> None:
    write(runtime, 1)
    first = runtime.checkpoints.periodic("worker-1")
    assert first is not None
    write(runtime, 2)  # a few events: fewer than 20
    assert runtime.checkpoints.periodic("worker-1") is None
    write(runtime, 8)
    assert runtime.ledger.head_position() - first.checkpoint.position >= 20
    second = runtime.checkpoints.periodic("worker-1")
    assert second is not None
    assert second.checkpoint.position > first.checkpoint.position
    assert runtime.ledger.verify(second.checkpoint).ok
    assert runtime.ledger.verify(first.checkpoint).ok


def test_after_m_seconds_only_when_something_else_was_appended(runtime: Runtime) -> None:
    start = datetime.now(UTC)
    at(runtime, start)
    write(runtime, 1)
    first = runtime.checkpoints.periodic("worker-1")
    assert first is not None
    at(runtime, start + timedelta(seconds=301))
    assert runtime.checkpoints.periodic("worker-1") is None  # idle: only its own events since
    write(runtime, 1, "later")
    second = runtime.checkpoints.periodic("worker-1")
    assert second is not None
    assert second.checkpoint.time == start + timedelta(seconds=301)
    assert [c.sequence for c in runtime.checkpoints.page(10)] == [2, 1]


def test_a_held_lease_makes_the_pass_step_aside(runtime: Runtime) -> None:
    write(runtime, 1)
    runtime.checkpoints.leases.acquire(CHECKPOINTS, LEDGER_SCOPE, "worker-2")
    with pytest.raises(LeaseBusy):
        runtime.checkpoints.periodic("worker-1")
    assert run_checkpoint(runtime.checkpoints, "worker-1") is None
    assert runtime.checkpoints.page(10) == []


def test_a_stale_holder_cannot_record_after_a_takeover(runtime: Runtime) -> None:
    write(runtime, 1)
    start = datetime.now(UTC)
    at(runtime, start)
    leases = runtime.checkpoints.leases
    stale = leases.acquire(CHECKPOINTS, LEDGER_SCOPE, "worker-1")
    at(runtime, start + leases.ttl + timedelta(seconds=1))
    fresh = leases.acquire(CHECKPOINTS, LEDGER_SCOPE, "worker-2")
    assert fresh.token == stale.token + 1
    at(runtime, start)  # the stale holder still thinks its lease is live
    with pytest.raises(LeaseLost):
        runtime.checkpoints.record("periodic", stale)
    assert runtime.checkpoints.page(10) == []
    at(runtime, start + leases.ttl + timedelta(seconds=2))
    made = runtime.checkpoints.record("periodic", fresh)
    assert [c.checkpoint for c in runtime.checkpoints.page(10)] == [made.checkpoint]


def test_pages_run_newest_first_with_a_cursor(runtime: Runtime) -> None:
    made: list[RecordedCheckpoint] = []
    for i in range(5):
        write(runtime, 1, f"page {i}")
        made.append(runtime.checkpoints.record("dana"))
    first = runtime.checkpoints.page(2)
    assert [c.sequence for c in first] == [5, 4]
    rest = runtime.checkpoints.page(10, before=first[-1].sequence)
    assert [c.checkpoint for c in first + rest] == [m.checkpoint for m in reversed(made)]
    assert all(c.by == "dana" for c in rest)
    replayed = runtime.ledger.read(made[0].recorded_position - 1, 1)
    assert replayed[0].event.position == made[0].checkpoint.position  # type: ignore[attr-defined]


def eventually_listed(runtime: Runtime, count: int) -> list[RecordedCheckpoint]:
    def listed() -> list[RecordedCheckpoint] | None:
        found = runtime.checkpoints.page(10)
        return found if len(found) >= count else None

    return eventually(listed)


def quick(settings: Settings) -> Settings:
    return msgspec.structs.replace(settings, checkpoint_every_events=1_000, checkpoint_every_seconds=0.5)


def test_the_worker_process_makes_them_through_its_actor(settings: Settings) -> None:
    process = WorkerProcess(quick(settings), threads=1)
    process.broker.flush_all()
    process.start()
    try:
        runtime = process.runtime
        write(runtime, 1)
        first = eventually_listed(runtime, 1)[0]
        assert first.by == "periodic"
        write(runtime, 1, "second")
        listed = eventually_listed(runtime, 2)
        assert runtime.ledger.verify(listed[0].checkpoint).ok
        time.sleep(1.5)  # idle now: no more checkpoints
        assert len(runtime.checkpoints.page(10)) == 2
    finally:
        process.stop()


def test_serve_without_redis_makes_them_in_process(settings: Settings) -> None:
    with Runtime(quick(settings), follow=False) as runtime:
        loop = InProcessAutopilot(runtime)
        loop.start()
        try:
            write(runtime, 1)
            listed = eventually_listed(runtime, 1)
            assert runtime.ledger.verify(listed[0].checkpoint).ok
        finally:
            loop.stop()
