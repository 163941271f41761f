"""The autopilot actor's own rules, called without a worker: a leased namespace sends the
message back (``LeaseRetry``, with Dramatiq's backoff) for far longer than a lease lasts, a
damaged message is dropped."""

from __future__ import annotations

from collections.abc import Iterator

import dramatiq
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.runner import ProjectionLag
from memwarden.workers.actors import (
    MAX_BACKOFF_MS,
    MAX_RETRIES,
    MAX_WAIT_RETRIES,
    MIN_BACKOFF_MS,
    LeaseRetry,
    declare_autopilot,
    declare_consolidation,
    redis_broker,
    retry_when,
    run_consolidation,
    run_pass,
)
from tests.conftest import on_redis

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def test_a_leased_namespace_sends_the_message_back_until_the_lease_is_long_gone(
    runtime: Runtime, settings: Settings
) -> None:
    written = runtime.memory.write(AGENT, WriteMemory(content="Standup is at 9:30"))
    assert written.id is not None
    broker = redis_broker(settings)
    try:
        actor = declare_autopilot(broker, lambda: runtime.autopilot, "worker-1")
        runtime.autopilot.leases.acquire("autopilot", AGENT.namespace, "worker-2")
        with pytest.raises(LeaseRetry) as retry:
            actor.fn(str(written.id), written.position)
        assert retry.value.delay is None  # Dramatiq's backoff: quick at first, then slower
    finally:
        broker.close()
    # A lease left by a killed holder holds its namespace until it expires: the message
    # must still be retried then (it was dead-lettered after ~5 s, and a consolidation
    # trigger was lost for good). The shortest wait the retries add up to, Dramatiq's
    # jitter at its lowest, is many times a lease.
    shortest = sum(min(MIN_BACKOFF_MS * 2**n, MAX_BACKOFF_MS) / 2 for n in range(MAX_WAIT_RETRIES)) / 1000
    assert shortest > 10 * settings.lease_seconds
    assert retry_when(MAX_WAIT_RETRIES - 1, retry.value)
    assert not retry_when(MAX_WAIT_RETRIES, retry.value)
    assert retry_when(MAX_WAIT_RETRIES - 1, ProjectionLag(10, 5))  # read models catching up: a wait too
    failure = RuntimeError("a bug's exception")
    assert retry_when(MAX_RETRIES - 1, failure)
    assert not retry_when(MAX_RETRIES, failure)


@pytest.mark.parametrize(("memory_id", "position"), [("not-a-uuid", 1), (None, 1), ("0" * 32, "x")])
def test_a_damaged_message_is_dropped(runtime: Runtime, memory_id: object, position: object) -> None:
    head = runtime.ledger.head_position()
    assert run_pass(runtime.autopilot, "worker-1", memory_id, position) is None
    assert runtime.ledger.head_position() == head


def test_the_consolidation_actor_drafts_once_and_retries_a_leased_namespace(
    runtime: Runtime, settings: Settings
) -> None:
    runtime.memory.write(AGENT, WriteMemory(content="The staging cluster is rebuilt every Sunday night"))
    last = runtime.memory.write(
        AGENT, WriteMemory(content="Every Sunday night the staging cluster is rebuilt")
    )
    broker = redis_broker(settings)
    try:
        actor = declare_consolidation(broker, lambda: runtime.consolidation, "worker-1")
        actor.fn(AGENT.namespace, last.position)
        head = runtime.ledger.head_position()
        assert runtime.reads.proposals(Identity(namespace="acme", actor="r", role="admin"), after=head).items
        actor.fn(AGENT.namespace, last.position)  # a redelivery drafts nothing
        assert (
            len(
                runtime.reads.proposals(Identity(namespace="acme", actor="r", role="admin"), after=head).items
            )
            == 1
        )
        runtime.consolidation.leases.acquire("consolidation", AGENT.namespace, "worker-2")
        with pytest.raises(dramatiq.Retry):
            actor.fn(AGENT.namespace, last.position)
    finally:
        broker.close()


@pytest.mark.parametrize(("namespace", "position"), [(None, 1), ("acme/\x00", 1), ("acme/eng", "x"), (7, 1)])
def test_a_damaged_consolidation_message_is_dropped(
    runtime: Runtime, namespace: object, position: object
) -> None:
    head = runtime.ledger.head_position()
    assert run_consolidation(runtime.consolidation, "worker-1", namespace, position) is None
    assert runtime.ledger.head_position() == head
