"""A real Redis outage and a killed worker: a Redis of the test's own (`redis-server
--save ""`, so a restart loses every queued message) is stopped in the middle of the
writes, a `memwarden worker` is killed with SIGKILL, both come back; every memory is then
judged, and exactly once (docs/architecture.md section 9: Redis down delays work, never drops it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import suppress
from uuid import UUID

import pytest
import redis

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import ConflictsJudged
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from tests.processes import REPO_ROOT, TIMED, eventually, free_port

pytestmark = TIMED

NAMESPACES = ("acme/eng/platform", "acme/eng/data", "acme/sales")
FINAL = {"judged", "not_current"}


def start_redis(port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    eventually(lambda: _pings(client), 20)
    return server


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "memwarden.api.cli.main", "worker", "--threads", "2"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def outage_env(env: dict[str, str]) -> dict[str, str]:
    port = free_port()
    tuned = dict(env)  # the test's embedder, for the workers and this process alike
    tuned.update(
        REDIS_URL=f"redis://127.0.0.1:{port}/0",
        MEMWARDEN_WORKER_HEARTBEAT_SECONDS="2",  # a killed worker's messages come back soon
        MEMWARDEN_AUTOPILOT_SWEEP_SECONDS="3",  # and so do the ones Redis lost
        MEMWARDEN_LEASE_SECONDS="5",
    )
    return tuned


def final_judgements(runtime: Runtime) -> Counter[UUID]:
    return Counter(
        r.event.memory_id
        for r in runtime.ledger.read(0, 1_000_000)
        if isinstance(r.event, ConflictsJudged) and r.event.outcome in FINAL
    )


def write_some(runtime: Runtime, start: int, count: int) -> list[UUID]:
    ids: list[UUID] = []
    for i in range(start, start + count):
        who = Identity(namespace=NAMESPACES[i % len(NAMESPACES)], actor="bot", role="agent")
        result = runtime.memory.write(
            who, WriteMemory(content=f"Service {i} of the fleet listens on port {8000 + i}")
        )
        assert result.id is not None
        ids.append(result.id)
    return ids


def test_redis_down_and_a_killed_worker_delay_judgement_never_drop_or_repeat_it(
    outage_env: dict[str, str],
) -> None:
    port = int(outage_env["REDIS_URL"].rsplit(":", 1)[1].split("/")[0])
    broker = start_redis(port)
    workers = [start_worker(outage_env), start_worker(outage_env)]
    try:
        with Runtime(Settings.from_env(outage_env)) as runtime:
            ids = write_some(runtime, 0, 12)
            eventually(lambda: len(final_judgements(runtime)) >= 3, 120)  # the workers are at it
            broker.terminate()  # Redis goes away, with everything queued in it
            broker.wait(30)
            ids += write_some(runtime, 12, 12)  # writes still succeed
            workers[0].send_signal(signal.SIGKILL)  # a worker dies mid-work
            workers[0].wait(30)
            time.sleep(1)
            broker = start_redis(port)
            workers[0] = start_worker(outage_env)
            eventually(lambda: set(ids) <= set(final_judgements(runtime)), 180)
            time.sleep(4)  # a sweep and a redelivery more: still nothing judged twice
            judged = final_judgements(runtime)
            assert {i: judged[i] for i in ids} == dict.fromkeys(ids, 1)
            assert set(judged) == set(ids)
    finally:
        for worker in workers:
            stop(worker)
        broker.terminate()
        with suppress(subprocess.TimeoutExpired):
            broker.wait(30)
