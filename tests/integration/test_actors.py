"""The autopilot actor's own rules, called without a worker: a leased namespace sends the
message back shortly (``Retry`` with a short delay), a damaged message is dropped."""

from __future__ import annotations

from collections.abc import Iterator

import dramatiq
import pytest

from api.runtime import Runtime
from domain.model.commands import WriteMemory
from domain.model.identity import Identity
from domain.settings import Settings
from workers.actors import LEASE_RETRY_MS, declare_autopilot, redis_broker, run_pass

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def test_a_leased_namespace_sends_the_message_back_soon(runtime: Runtime, settings: Settings) -> None:
    written = runtime.memory.write(AGENT, WriteMemory(content="Standup is at 9:30"))
    assert written.id is not None
    broker = redis_broker(settings)
    try:
        actor = declare_autopilot(broker, lambda: runtime.autopilot, "worker-1")
        runtime.autopilot.leases.acquire("autopilot", AGENT.namespace, "worker-2")
        with pytest.raises(dramatiq.Retry) as retry:
            actor.fn(str(written.id), written.position)
        assert retry.value.delay is not None
        assert LEASE_RETRY_MS <= retry.value.delay <= 3 * LEASE_RETRY_MS
    finally:
        broker.close()


@pytest.mark.parametrize(("memory_id", "position"), [("not-a-uuid", 1), (None, 1), ("0" * 32, "x")])
def test_a_damaged_message_is_dropped(runtime: Runtime, memory_id: object, position: object) -> None:
    head = runtime.ledger.head_position()
    assert run_pass(runtime.autopilot, "worker-1", memory_id, position) is None
    assert runtime.ledger.head_position() == head
