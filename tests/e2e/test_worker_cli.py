"""``memwarden worker`` as a real process on real Redis: it judges what is written, and
after a ``kill -9`` and a restart (writes went on meanwhile) every memory is judged
exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import ConflictsJudged
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.workers.actors import redis_broker
from tests.conftest import on_redis
from tests.processes import wait_until

ROOT = Path(__file__).resolve().parents[2]
NAMESPACES = [f"acme/team{n}" for n in range(4)]


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        broker = redis_broker(settings)
        broker.flush_all()  # this database's queue only (its own key prefix)
        broker.close()
        yield rt


def start_worker(settings: Settings) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url or "",
        "MEMWARDEN_DATA_DIR": str(settings.data_dir),
        "REDIS_URL": settings.redis_url or "",
        "MEMWARDEN_LEASE_SECONDS": "2",
        "MEMWARDEN_WORKER_HEARTBEAT_SECONDS": "2",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "memwarden.api.cli.main", "worker", "--threads", "2"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().startswith("memwarden worker: running")
    return process


def judged(rt: Runtime) -> Counter[UUID]:
    return Counter(
        r.event.memory_id
        for r in rt.ledger.read(0, 100_000)
        if isinstance(r.event, ConflictsJudged) and r.event.outcome == "judged"
    )


def write_some(rt: Runtime, start: int, count: int) -> list[UUID]:
    ids = []
    for n in range(start, start + count):
        who = Identity(namespace=NAMESPACES[n % len(NAMESPACES)], actor="bot", role="agent")
        result = rt.memory.write(
            who, WriteMemory(content=f"Build {n} of the billing service took {n % 7 + 2} minutes")
        )
        assert result.id is not None
        ids.append(result.id)
    return ids


@pytest.mark.slow
def test_after_kill_9_and_a_restart_every_memory_is_judged_exactly_once(
    runtime: Runtime, settings: Settings
) -> None:
    worker = start_worker(settings)
    try:
        first = write_some(runtime, 0, 12)
        wait_until(lambda: len(judged(runtime)) >= 3, 60)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        later = write_some(runtime, 12, 8)  # written while no worker runs
        worker = start_worker(settings)
        wait_until(lambda: set(first + later) <= set(judged(runtime)), 120)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    counts = judged(runtime)
    assert all(counts[m] == 1 for m in first + later), counts
    assert worker.returncode == 0
