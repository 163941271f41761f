"""The conflict autopilot end to end on real Redis and PostgreSQL: writes over HTTP, the
dispatcher following the ledger onto the Dramatiq queue, the actor judging, and reviewers
answering over HTTP. Plus the dispatcher's promise: a broker outage delays, never drops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from memwarden.domain.settings import Settings
from memwarden.workers.actors import redis_broker
from memwarden.workers.dispatcher import Dispatcher
from memwarden.workers.main import WorkerProcess
from tests.conftest import on_redis
from tests.e2e.api_helpers import Api
from tests.processes import METRICS_AUTH, eventually

NS = "acme/eng/platform"


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def worker(settings: Settings, api: Api) -> Iterator[WorkerProcess]:
    api.runtime.memory.band = None  # the autopilot's pairs, not settled inside the write
    process = WorkerProcess(settings, threads=2)
    process.broker.flush_all()  # this database's queue only (its own key prefix)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def write(api: Api, key: str, content: str) -> str:
    response = api.mem(key, "write", {"content": content})
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "stored"
    memory_id: str = response.json()["id"]
    return memory_id


def get(api: Api, key: str, path: str) -> Any:
    response = api.call(key, path, method="GET")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_a_finding_under_lower_trust_is_found_by_the_worker_and_resolved(
    api: Api, worker: WorkerProcess
) -> None:
    agent = api.key(NS, "bot", "agent")
    admin = api.key("acme/eng", "rev", "admin")
    old = write(api, agent, "Standup is at 9:30")
    new = write(api, agent, "Standup is at 10:00")
    findings = eventually(lambda: get(api, admin, "/v1/admin/findings"))
    assert [(f["memory_a"], f["memory_b"], f["rule"]) for f in findings] == [(old, new, "frame")]
    stats = eventually(lambda: (s := api.mem(agent, "stats").json())["unjudged"] == 0 and s)
    assert stats["open_findings"] == 1
    metrics = api.client.get("/metrics", headers=METRICS_AUTH).text
    assert "memwarden_autopilot_open_findings 1\n" in metrics
    assert "memwarden_autopilot_unjudged 0\n" in metrics
    assert 'memwarden_autopilot_memories{outcome="judged"} 2\n' in metrics
    assert 'memwarden_dispatch_lag{dispatcher="autopilot"}' in metrics
    assert "memwarden_lease_takeovers 0\n" in metrics
    assert api.call(agent, "/v1/admin/findings", method="GET").status_code == 403

    path = f"/v1/admin/findings/{findings[0]['id']}/resolve"
    assert api.call(admin, path, {"decision": "keep_everything"}).status_code == 400
    assert api.call(admin, path, {"decision": "keep_b", "reason": "a\u0000b"}).status_code == 400
    assert api.call(admin, path, {"decision": "keep_b", "namespace": "acme"}).status_code == 400
    resolved = api.call(admin, path, {"decision": "keep_b", "reason": "moved to 10"})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["decision"] == "keep_b"
    assert api.call(admin, path, {"decision": "dismiss"}).status_code == 409
    api.settle()  # the agent reads what the admin wrote
    assert api.mem(agent, "read", {"id": old}).json()["status"] == "retired"
    assert api.mem(agent, "stats").json()["open_findings"] == 0
    assert get(api, admin, "/v1/admin/findings?status=resolved")[0]["resolution_reason"] == "moved to 10"
    ops = [r.op for r in api.audit_records()]
    assert "resolve_finding" in ops


def test_under_auto_the_worker_settles_and_a_reviewer_overturns(api: Api, worker: WorkerProcess) -> None:
    agent = api.key(NS, "bot", "agent")
    admin = api.key("acme/eng", "rev", "admin")
    put = api.call(admin, f"/v1/admin/policies/{NS}", {"conflict_review": "auto"}, method="PUT")
    assert put.status_code == 200, put.text
    old = write(api, agent, "The staging cluster has 12 nodes")
    new = write(api, agent, "The staging cluster has 16 nodes")
    decisions = eventually(lambda: get(api, admin, "/v1/admin/decisions"))
    assert [(d["winner"], d["loser"], d["status"]) for d in decisions] == [(new, old, "settled")]
    assert get(api, admin, "/v1/admin/findings") == []
    history = api.mem(agent, "history", {"id": new}).json()["versions"]
    assert any(step.get("reason") == "autopilot" for step in history)

    path = f"/v1/admin/decisions/{decisions[0]['id']}/overturn"
    assert api.call(agent, path, {}).status_code == 403
    assert api.call(admin, f"/v1/admin/decisions/{UUID(int=1)}/overturn", {}).status_code == 404
    overturned = api.call(admin, path, {"reason": "the old count is right"})
    assert overturned.status_code == 200, overturned.text
    restored = overturned.json()["restored"]
    api.settle()
    read = api.mem(agent, "read", {"id": restored})
    assert read.status_code == 200, read.text
    assert api.mem(agent, "read", {"id": restored}).json()["content"] == "The staging cluster has 12 nodes"
    assert api.mem(agent, "read", {"id": new}).json()["status"] == "retired"
    assert api.call(admin, path, {}).status_code == 409
    assert get(api, admin, "/v1/admin/decisions?status=overturned")[0]["restored"] == restored
    assert api.call(admin, "/v1/admin/decisions?status=nope", method="GET").status_code == 400
    # the restored memory is judged too, and the retired winner is no neighbour of it
    eventually(lambda: api.mem(agent, "stats").json()["unjudged"] == 0)
    assert [d["status"] for d in get(api, admin, "/v1/admin/decisions")] == ["overturned"]


def test_a_broker_outage_delays_the_dispatcher_and_loses_nothing(api: Api, settings: Settings) -> None:
    agent = api.key(NS, "bot", "agent")
    sent: list[UUID] = []
    down = True

    def send(memory_id: UUID, _position: int) -> None:
        if down and len(sent) == 1:
            raise ConnectionError("redis is down")
        sent.append(memory_id)

    dispatcher = Dispatcher(api.runtime.ledger, send, name="outage-test")
    dispatcher.register()
    first = write(api, agent, "Payroll runs on Friday")
    second = write(api, agent, "The wiki lists the runbooks")
    with pytest.raises(ConnectionError):
        dispatcher.dispatch_once()
    stuck = dispatcher.position()
    assert sent == [UUID(first)]
    assert 0 < stuck < api.runtime.ledger.head_position()  # past the first, before the second
    with pytest.raises(ConnectionError):
        dispatcher.dispatch_once()
    assert dispatcher.position() == stuck
    down = False
    dispatcher.catch_up()
    assert sent == [UUID(first), UUID(second)]  # each once, in order
    assert dispatcher.position() == api.runtime.ledger.head_position()
    dispatcher.catch_up()
    assert sent == [UUID(first), UUID(second)]
    redis_broker(settings).close()


def test_poison_bodies_on_the_reviewer_routes_are_400s_and_change_nothing(api: Api) -> None:
    admin = api.key("acme/eng", "rev", "admin")
    finding = f"/v1/admin/findings/{UUID(int=7)}/resolve"
    decision = f"/v1/admin/decisions/{UUID(int=7)}/overturn"
    head = api.runtime.ledger.head_position()
    raw_bodies = [
        (finding, b'{"decision": "keep_a", "reason": "x \\ud800 y"}', "reason contains a lone surrogate"),
        (decision, b'{"reason": "x \\u0000 y"}', "reason contains a NUL character"),
        (
            finding,
            b'{"decision": "keep_a", "reason": "' + b"r" * 1001 + b'"}',
            "Expected `str` of length <= 1000",
        ),
        (decision, b'{"reason": ""}', "Expected `str` of length >= 1"),
        (finding, b'{"decision": ' * 40 + b"1" + b"}" * 40, "deeper than 32 levels"),
        (decision, b'{"reason": "ok", "target": "acme"}', "Object contains unknown field `target`"),
    ]
    for path, raw, named in raw_bodies:
        response = api.client.post(
            path,
            content=raw,
            headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
        )
        assert response.status_code == 400, (path, response.text)
        assert named in response.json()["detail"], response.json()
    for path in (finding, decision):  # a well-formed body for nothing there: 404, audited as a miss
        body = {"decision": "dismiss", "reason": "\u200b"} if path == finding else {"reason": "\u200b"}
        assert api.call(admin, path, body).status_code == 404
    written = [r.event for r in api.runtime.ledger.read(head, 10_000)]
    assert all(type(e).__name__ == "AuditRecorded" for e in written)
    assert api.client.get("/readyz").status_code == 200


def test_a_slow_batch_commits_how_far_it_got(api: Api) -> None:
    agent = api.key(NS, "bot", "agent")
    sent: list[UUID] = []

    def slow(memory_id: UUID, _position: int) -> None:
        time.sleep(0.3)
        sent.append(memory_id)

    dispatcher = Dispatcher(api.runtime.ledger, slow, name="slow-test", max_batch_seconds=0.5)
    dispatcher.register()
    ids = [UUID(write(api, agent, f"Build {n} of the wiki took {n + 2} minutes")) for n in range(3)]
    dispatcher.dispatch_once()
    assert sent == ids[:2]  # 0.6 s after the second send: the batch commits there
    assert 0 < dispatcher.position() < api.runtime.ledger.head_position()
    dispatcher.catch_up()
    assert sent == ids


def test_a_long_consolidation_pass_does_not_hold_up_the_autopilot(
    settings: Settings, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.runtime.memory.band = None
    process = WorkerProcess(settings, threads=1)  # one autopilot thread: nothing to spare
    process.broker.flush_all()
    consolidation = process.runtime.consolidation
    started, release = threading.Event(), threading.Event()
    real = consolidation.consolidate

    def slow(namespace: str, position: int, holder: str) -> object:
        started.set()
        release.wait(60)
        return real(namespace, position, holder)

    monkeypatch.setattr(consolidation, "consolidate", slow)
    process.start()
    try:
        process.consolidation.send(NS, api.runtime.ledger.head_position())
        assert started.wait(30)  # the maintenance thread is held in a pass
        agent = api.key(NS, "bot", "agent")
        admin = api.key("acme/eng", "rev", "admin")
        write(api, agent, "Standup is at 9:30")
        write(api, agent, "Standup is at 10:00")
        assert eventually(lambda: get(api, admin, "/v1/admin/findings"))  # judged meanwhile
        assert not release.is_set()
    finally:
        release.set()
        process.stop()
