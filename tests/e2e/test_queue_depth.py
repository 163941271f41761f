"""Queue depth on /metrics: the deployment's Dramatiq queue in Redis, or the passes the
in-process dispatchers of `memwarden serve` hold unsent when there is no Redis."""

from __future__ import annotations

import re
import threading
from uuid import UUID

import pytest

from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.workers.actors import declare_autopilot, holder_id, redis_broker
from memwarden.workers.dispatcher import Dispatcher
from memwarden.workers.main import InProcessAutopilot
from memwarden.workers.metrics import count_in_process, uncount
from tests.conftest import on_redis
from tests.e2e.api_helpers import Api
from tests.processes import METRICS_AUTH

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


def depth(api: Api, labels: str) -> float | None:
    text = api.client.get("/metrics", headers=METRICS_AUTH).text
    found = re.search(r"^memwarden_worker_queue_depth\{" + re.escape(labels) + r"\} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def test_messages_waiting_in_redis_are_counted(api: Api) -> None:
    broker = redis_broker(api.runtime.settings)
    try:
        broker.flush_all()  # this database's queue only
        assert depth(api, 'queue="autopilot",broker="redis"') == 0
        actor = declare_autopilot(broker, lambda: api.runtime.autopilot, holder_id())
        written = api.runtime.memory.write(AGENT, WriteMemory(content="Standup is at 9:30"))
        for _ in range(3):  # no worker consumes them
            actor.send(str(written.id), written.position)
        assert depth(api, 'queue="autopilot",broker="redis"') == 3
    finally:
        broker.flush_all()
        broker.close()


def test_in_process_passes_are_counted_while_serve_runs_them(api: Api) -> None:
    loop = InProcessAutopilot(api.runtime)
    loop.start()
    try:
        assert depth(api, 'queue="autopilot",broker="in-process"') == 0
        assert depth(api, 'queue="consolidation",broker="in-process"') == 0
        assert depth(api, 'queue="autopilot",broker="redis"') is None
    finally:
        loop.stop()
    assert depth(api, 'queue="autopilot",broker="in-process"') is None


def test_an_in_process_backlog_shows_while_a_pass_runs(api: Api) -> None:
    for n in range(3):
        api.runtime.memory.write(
            AGENT, WriteMemory(content=f"Build {n} of the billing service took {n + 2} minutes")
        )
    release, entered = threading.Event(), threading.Event()

    def slow(_memory_id: UUID, _position: int) -> None:
        entered.set()
        release.wait(10)

    dispatcher: Dispatcher[UUID] = Dispatcher(api.runtime.ledger, slow, name="held")
    dispatcher.register()
    count_in_process(dispatcher)
    worker = threading.Thread(target=dispatcher.dispatch_once)
    worker.start()
    try:
        assert entered.wait(10)
        assert depth(api, 'queue="held",broker="in-process"') == 3
    finally:
        release.set()
        worker.join(30)
        uncount(dispatcher)
    assert dispatcher.sent == 3
    assert dispatcher.backlog == 0
