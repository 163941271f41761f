"""Consolidation after a worker is killed mid-pass (issue 25): `memwarden worker` on a
Redis of the test session's own and real PostgreSQL. The first worker is SIGKILLed while
its consolidation pass holds the namespace's lease (the pass is waiting on the model
drafter); a second worker starts and four near-duplicates are written in that namespace
while the dead worker's lease still holds it. Their proposal must arrive once the lease
expires: a message that met the leased namespace used to be retried for about 5 s and
dropped for good, and nothing ever sent that namespace to consolidation again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.consolidation import CONSOLIDATION
from memwarden.domain.model.events import LeaseTaken
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import lease_id
from memwarden.domain.settings import Settings
from memwarden.projections.listing import ListQuery
from tests.conftest import on_redis
from tests.e2e.fleet import Fleet, base_env, fleet
from tests.integration.test_consolidation_drafter import statement
from tests.local_http import LocalServer, send
from tests.processes import TIMED, eventually

pytestmark = TIMED

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent")
REVIEWER = Identity(namespace="acme", actor="rev", role="admin")
LEASE_SECONDS = 15
FIRST = (
    "The billing database is backed up to cold storage every Friday evening",
    "Every Friday evening, the billing database is backed up to its cold storage",
)
FOUR = (
    "The staging cluster is rebuilt from the golden image every Sunday night",
    "Every Sunday night the staging cluster is rebuilt from the golden image",
    "The staging cluster gets rebuilt from the golden image every Sunday night",
    "Every Sunday night, the staging cluster is rebuilt from its golden image",
)


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    return on_redis(settings, redis_url)


class StallingModel:
    """The model drafter: its first request is held (the pass that asked holds its lease
    meanwhile) until ``release``; later ones are answered at once."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.released = threading.Event()
        self.server = LocalServer(self.respond)

    def respond(self, handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        if not self.asked.is_set():
            self.asked.set()
            self.released.wait(60)
        send(handler, 200, statement("A statement the model drafted for the cluster"))


@pytest.fixture
def model() -> Iterator[StallingModel]:
    stalling = StallingModel()
    with stalling.server:
        yield stalling
        stalling.released.set()


@pytest.fixture
def workers(settings: Settings, model: StallingModel, tmp_path: Path) -> Iterator[Fleet]:
    env = base_env(
        settings.database_url or "",
        settings.data_dir,
        REDIS_URL=settings.redis_url or "",
        MEMWARDEN_DRAFTER="openai",
        MEMWARDEN_DRAFTER_URL=model.server.url,
        MEMWARDEN_DRAFTER_MODEL="drafter-model",
        MEMWARDEN_LEASE_SECONDS=str(LEASE_SECONDS),
        MEMWARDEN_CONSOLIDATION_PAUSE_SECONDS="1",
        # the killed worker's taken messages stay with it for the whole test: the proposal
        # has to come from what the new worker is sent
        MEMWARDEN_WORKER_HEARTBEAT_SECONDS="600",
    )
    with fleet(env, tmp_path / "logs") as started:
        yield started


def proposal_of(runtime: Runtime, ids: set[UUID]) -> bool:
    found = runtime.reads.proposals(REVIEWER, ListQuery(), after=runtime.ledger.head_position()).items
    return any(ids <= set(p.sources) for p in found)


def test_a_worker_killed_mid_pass_does_not_stall_consolidation(
    settings: Settings, model: StallingModel, workers: Fleet
) -> None:
    with Runtime(settings) as runtime:
        workers.worker("worker-a")
        for text in FIRST:
            assert runtime.memory.write(AGENT, WriteMemory(content=text)).outcome == "stored"
        assert model.asked.wait(60), workers.logs_text()  # worker-a's pass is drafting, lease held
        lease = runtime.ledger.stream_heads([lease_id(CONSOLIDATION, AGENT.namespace)])
        held = next(iter(lease.values())).event
        assert isinstance(held, LeaseTaken)
        workers.kill("worker-a")
        model.released.set()

        workers.worker("worker-b")
        ids = {runtime.memory.write(AGENT, WriteMemory(content=text)).id for text in FOUR}
        assert None not in ids
        four = {i for i in ids if i is not None}
        eventually(lambda: proposal_of(runtime, four), LEASE_SECONDS + 45)
    log = workers.log("worker-b")
    assert "pass=consolidation" in log
    assert "result=leased" in log  # it met the dead worker's lease, and waited it out
