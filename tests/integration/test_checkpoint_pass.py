"""The periodic checkpoint pass: a signed checkpoint once N events or M seconds (with
something else appended) passed, kept by the ledger, under a lease, made once; by the
Dramatiq actor of `memwarden worker` and by the in-process loop of `memwarden serve`."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.model.checkpoints import CHECKPOINTS, LEDGER_SCOPE
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import LeaseBusy, LeaseLost
from memwarden.domain.settings import Settings
from memwarden.workers.actors import run_checkpoint
from memwarden.workers.main import InProcessAutopilot, WorkerProcess
from tests.conftest import on_redis
from tests.processes import eventually

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


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


def kept(runtime: Runtime) -> list[Checkpoint]:
    return [k.checkpoint for k in runtime.ledger.checkpoint_log.newest(100)]


def test_the_first_checkpoint_verifies_and_is_not_made_again(runtime: Runtime) -> None:
    write(runtime, 2)
    made = runtime.checkpoints.periodic("worker-1")
    assert made is not None
    assert made.position < runtime.ledger.head_position()  # its lease's release followed
    assert runtime.ledger.verify(made).ok
    head = runtime.ledger.head_position()
    assert runtime.checkpoints.periodic("worker-1") is None  # a redelivery: nothing more
    assert runtime.checkpoints.periodic("worker-2") is None
    assert runtime.ledger.head_position() == head  # not even a lease was taken
    assert kept(runtime) == [made]


def test_every_n_events_brings_the_next_one(runtime: Runtime) -> None:
    write(runtime, 1)
    first = runtime.checkpoints.periodic("worker-1")
    assert first is not None
    write(runtime, 2)  # a few events: fewer than 20
    assert runtime.checkpoints.periodic("worker-1") is None
    write(runtime, 8)
    assert runtime.ledger.head_position() - first.position >= 20
    second = runtime.checkpoints.periodic("worker-1")
    assert second is not None
    assert second.position > first.position
    assert runtime.ledger.verify(second).ok
    assert runtime.ledger.verify(first).ok
    assert kept(runtime) == [second, first]


def test_after_m_seconds_only_when_something_else_was_appended(runtime: Runtime) -> None:
    write(runtime, 1)
    first = runtime.checkpoints.periodic("worker-1")
    assert first is not None
    at(runtime, datetime.now(UTC) + timedelta(seconds=301))
    assert runtime.checkpoints.periodic("worker-1") is None  # idle: only its own lease since
    write(runtime, 1, "later")
    second = runtime.checkpoints.periodic("worker-1")
    assert second is not None
    assert kept(runtime) == [second, first]


def test_a_held_lease_makes_the_pass_step_aside(runtime: Runtime) -> None:
    write(runtime, 1)
    runtime.checkpoints.leases.acquire(CHECKPOINTS, LEDGER_SCOPE, "worker-2")
    with pytest.raises(LeaseBusy):
        runtime.checkpoints.periodic("worker-1")
    assert run_checkpoint(runtime.checkpoints, "worker-1") is None
    assert kept(runtime) == []


def test_a_stale_holder_signs_nothing_after_a_takeover(runtime: Runtime) -> None:
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
        runtime.checkpoints.make(stale)
    assert kept(runtime) == []
    at(runtime, start + leases.ttl + timedelta(seconds=2))
    made = runtime.checkpoints.make(fresh)
    assert made is not None
    assert kept(runtime) == [made]
    assert runtime.checkpoints.make(leases.acquire(CHECKPOINTS, LEDGER_SCOPE, "worker-3")) is None  # not due


def eventually_kept(runtime: Runtime, count: int) -> list[Checkpoint]:
    def listed() -> list[Checkpoint] | None:
        found = kept(runtime)
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
        eventually_kept(runtime, 1)
        write(runtime, 1, "second")
        listed = eventually_kept(runtime, 2)
        assert runtime.ledger.verify(listed[0]).ok
        time.sleep(2)  # the passes over the second write append too: one more checkpoint, say
        settled = len(kept(runtime))
        time.sleep(2)  # idle now: no more checkpoints
        assert len(kept(runtime)) == settled
    finally:
        process.stop()


def test_serve_without_redis_makes_them_in_process(settings: Settings) -> None:
    with Runtime(quick(settings), follow=False) as runtime:
        loop = InProcessAutopilot(runtime)
        loop.start()
        try:
            write(runtime, 1)
            listed = eventually_kept(runtime, 1)
            assert runtime.ledger.verify(listed[0]).ok
        finally:
            loop.stop()
