"""Async write tickets on the ``write_ticket`` actor of real `memwarden worker` processes, on a
Redis of the test's own and real PostgreSQL: the API's ticket path sends each committed
ticket; a redelivery applies nothing twice; a ticket submitted while Redis is down is
applied all the same; a worker killed (-9) in the middle of a ticket leaves it to be
applied exactly once after the restart."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.api.http.schemas import WriteBody
from memwarden.bootstrap.runtime import Runtime
from memwarden.bootstrap.tickets import WriteTickets
from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import QUEUED_OP
from memwarden.domain.settings import Settings
from memwarden.workers.actors import TICKETS_QUEUE, TicketSender, redis_broker
from memwarden.workers.tickets import TicketStore, TicketWorker
from tests.e2e.api_helpers import Api
from tests.e2e.fleet import Fleet, deployment_env, fleet, redis_server
from tests.local_http import LocalServer, send
from tests.processes import METRICS_AUTH, free_port, wait_until

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")
STALE = 2.0


class Deployment:
    """The test's side of a deployment: its own Redis, the API's ticket path (without a
    thread of its own unless a test starts one) and the environment of its workers."""

    def __init__(self, settings: Settings, logs: Path) -> None:
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.env = deployment_env(
            settings,
            REDIS_URL=f"redis://127.0.0.1:{self.port}/0",
            MEMWARDEN_TICKET_STALE_SECONDS=str(STALE),
            MEMWARDEN_TICKETS="queue",
        )
        self.settings = Settings.from_env(self.env)
        self.redis = redis_server(self.port, logs)
        self.runtime = Runtime(self.settings, follow=False)
        ledger = self.runtime.ledger
        self.store = TicketStore(ledger.datastore, ledger.schema, STALE)
        self.sender = TicketSender(self.settings)
        self.fallback = TicketWorker(self.store, self.runtime.memory.run_queued, min_age=3600)
        self.tickets = WriteTickets(self.store, self.runtime.memory, self.fallback, self.sender)

    def submit(self, content: str) -> UUID:
        return self.tickets.submit(AGENT, "k-test", WriteBody(content=content, run_async=True).batch_item())

    def state(self, ticket: UUID) -> str:
        status = self.store.status(ticket, AGENT)
        assert status is not None
        return status.state

    def result(self, ticket: UUID) -> dict[str, Any]:
        status = self.store.status(ticket, AGENT)
        assert status is not None
        assert status.result is not None
        return status.result

    def stop_redis(self) -> None:
        self.redis.terminate()
        self.redis.wait(30)

    def start_redis(self) -> None:
        self.redis = redis_server(self.port, self.logs)

    def queued(self) -> int:
        broker = redis_broker(self.settings)
        try:
            return int(broker.do_qsize(TICKETS_QUEUE))
        finally:
            broker.close()

    def written(self) -> tuple[Counter[str], int]:
        """Memories on the ledger by content, and how many queued writes ran (audited)."""
        events = [r.event for r in self.runtime.ledger.read(0, 100_000)]
        contents = Counter(e.content or "" for e in events if isinstance(e, MemoryWritten))
        ran = sum(1 for e in events if isinstance(e, AuditRecorded) and e.op == QUEUED_OP)
        return contents, ran

    def close(self) -> None:
        self.fallback.stop()
        self.sender.close()
        self.runtime.close()
        if self.redis.poll() is None:
            self.stop_redis()


@pytest.fixture
def deployment(settings: Settings, tmp_path: Path) -> Iterator[Deployment]:
    opened = Deployment(settings, tmp_path / "logs")
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def processes(deployment: Deployment) -> Iterator[Fleet]:
    with fleet(deployment.env, deployment.logs) as started:
        yield started


def test_a_worker_applies_a_sent_ticket_and_a_redelivery_applies_nothing_twice(
    deployment: Deployment, processes: Fleet
) -> None:
    processes.worker("worker")
    ticket = deployment.submit("Rollbacks of the billing service take ten minutes")
    wait_until(lambda: deployment.state(ticket) == "done", 60)  # no thread of the test runs it
    assert deployment.result(ticket)["outcome"] == "stored"
    for _ in range(3):  # the same message again, as a redelivery would bring it
        deployment.sender.send(ticket)
    wait_until(lambda: deployment.queued() == 0, 30)
    contents, ran = deployment.written()
    assert contents["Rollbacks of the billing service take ten minutes"] == 1
    assert ran == 1
    assert deployment.result(ticket)["outcome"] == "stored"
    assert processes.stop("worker") == 0


def test_a_ticket_submitted_while_redis_is_down_is_applied(deployment: Deployment, processes: Fleet) -> None:
    deployment.stop_redis()
    deployment.fallback.start()  # this API process runs what it could not send
    handed = deployment.submit("Staging is rebuilt every Sunday night")
    wait_until(lambda: deployment.state(handed) == "done", 30)
    deployment.fallback.stop()  # an API process gone before it ran what it was handed
    deployment.fallback = TicketWorker(deployment.store, deployment.runtime.memory.run_queued)
    lost = deployment.submit("The data team meets on Wednesdays")
    assert deployment.state(lost) == "pending"
    deployment.start_redis()
    processes.worker("worker")  # its sweep sends what waited longer than the stale time
    wait_until(lambda: deployment.state(lost) == "done", 60)
    contents, ran = deployment.written()
    assert contents["Staging is rebuilt every Sunday night"] == 1
    assert contents["The data team meets on Wednesdays"] == 1
    assert ran == 2
    assert deployment.result(lost)["outcome"] == "stored"


def test_with_no_worker_running_the_api_sends_a_ticket_then_runs_it_itself(deployment: Deployment) -> None:
    assert deployment.settings.tickets == "queue"
    with (
        Runtime(deployment.settings) as runtime,
        TestClient(app=create_app(deployment.settings, runtime)) as client,
    ):
        api = Api(runtime, client)
        agent = api.key(AGENT.namespace, AGENT.actor, AGENT.role)
        accepted = api.mem(agent, "write", {"content": "Release notes go to #releases", "async": True})
        assert accepted.status_code == 202
        ticket = UUID(accepted.json()["ticket"])
        assert deployment.state(ticket) == "pending"  # sent, not run here at once
        assert deployment.queued() == 1
        metrics = client.get("/metrics", headers=METRICS_AUTH).text
        assert 'memwarden_write_tickets_open{state="pending"} 1' in metrics
        assert 'memwarden_worker_queue_depth{queue="tickets",broker="redis"} 1' in metrics
        assert re.search(r"^memwarden_write_tickets_oldest_open_seconds \d", metrics, re.M)
        wait_until(lambda: deployment.state(ticket) == "done", 30)  # no worker took it: the API did
        status = api.mem(agent, "write_status", {"ticket": str(ticket)}).json()
        assert (
            'memwarden_write_tickets_open{state="pending"} 0'
            in client.get("/metrics", headers=METRICS_AUTH).text
        )
    assert status["result"]["outcome"] == "stored"
    contents, ran = deployment.written()
    assert contents["Release notes go to #releases"] == 1
    assert ran == 1


FACT = "Rollbacks take ten minutes on the billing service"


class SlowExtractor:
    """An OpenAI-compatible extractor whose first answer waits until ``release``: the
    worker asking it is in the middle of a ticket (claimed, nothing appended)."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.release = threading.Event()
        self.server = LocalServer(self.respond)

    def respond(self, handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        if not self.asked.is_set():
            self.asked.set()
            self.release.wait(60)
        answer = json.dumps([FACT])
        send(handler, 200, json.dumps({"choices": [{"message": {"content": answer}}]}).encode())


@pytest.mark.slow
def test_a_worker_killed_mid_ticket_leaves_it_applied_exactly_once_after_a_restart(
    deployment: Deployment, processes: Fleet
) -> None:
    extractor = SlowExtractor()
    with extractor.server as stub:
        model = {"MEMWARDEN_EXTRACTOR_URL": stub.url, "MEMWARDEN_EXTRACTOR_MODEL": "m"}
        processes.worker("worker", env=model)
        ticket = deployment.submit("The team said rollbacks take ten minutes, on the billing service")
        assert extractor.asked.wait(60), processes.logs_text()
        assert deployment.state(ticket) == "running"
        processes.kill("worker")  # kill -9 in the middle of the ticket
        extractor.release.set()
        assert deployment.state(ticket) == "running"  # claimed by a worker that is gone
        processes.worker("worker", env=model)  # the ticket comes back once its claim is stale
        wait_until(lambda: deployment.state(ticket) == "done", 90)
        wait_until(lambda: deployment.queued() == 0, 30)
    contents, ran = deployment.written()
    assert contents[FACT] == 1
    assert ran == 1
    result = deployment.result(ticket)
    assert result["extracted"] is True
    assert [f["outcome"] for f in result["facts"]] == ["stored"]
