"""The fencing test: a worker process stopped with SIGSTOP mid-pass, past its lease; a
second holder takes the lease over and judges; the first resumes and its late append is
refused by the ledger (the lease stream's version is taken), so nothing is applied twice.

The stopped worker's clock is frozen at its start, as a paused VM's would read on resume:
its own expiry check still believes in the lease, so only the fencing token stops it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import ConflictsJudged, FindingOpened, LeaseEvent
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import lease_id
from memwarden.domain.services.leases import Leases
from memwarden.domain.settings import Settings
from tests.local_http import LocalServer, send

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent")
TTL_SECONDS = 2

WORKER = """
import sys
from datetime import timedelta
from uuid import UUID
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.leases import LeaseLost
from memwarden.domain.services.leases import Leases

with Runtime(follow=False) as rt:
    start = rt.memory.clock()
    rt.memory.clock = lambda: start  # frozen: on resume it still believes in its lease
    rt.autopilot.leases = Leases(rt.ledger, lambda: start, ttl=timedelta(seconds=%d))
    print("ready", flush=True)
    try:
        result = rt.autopilot.judge_memory(UUID(sys.argv[1]), int(sys.argv[2]), "worker-1")
    except LeaseLost as error:
        print("lease_lost", error, flush=True)
        sys.exit(3)
    print("appended", result, flush=True)
"""


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def test_a_stopped_worker_past_its_lease_cannot_append_when_it_resumes(
    runtime: Runtime, settings: Settings, tmp_path: Path
) -> None:
    asked = threading.Event()
    answer = threading.Event()

    def respond(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        asked.set()
        answer.wait(60)
        content = json.dumps({"contradiction": True, "reason": "-"})
        send(handler, 200, json.dumps({"choices": [{"message": {"content": content}}]}).encode())

    runtime.memory.write(AGENT, WriteMemory(content="Standup is at 9:30"))
    written = runtime.memory.write(AGENT, WriteMemory(content="Standup is at 10:00"))
    other = runtime.memory.write(AGENT, WriteMemory(content="Payroll runs on Friday"))
    assert written.id is not None
    assert other.id is not None
    runtime.reads.wait_for(other.position)
    with LocalServer(respond) as judge:
        env = {
            **os.environ,
            "DATABASE_URL": settings.database_url or "",
            "MEMWARDEN_DATA_DIR": str(settings.data_dir),
            "MEMWARDEN_JUDGE": "openai",
            "MEMWARDEN_JUDGE_URL": judge.url,
            "MEMWARDEN_JUDGE_MODEL": "slow-judge",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER % TTL_SECONDS, str(written.id), str(written.position)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert asked.wait(120), "the worker never asked its judge"
            os.kill(worker.pid, signal.SIGSTOP)  # mid-pass, holding the lease (token 1)
            answer.set()  # the answer waits in its socket
            time.sleep(TTL_SECONDS + 0.5)  # the lease expires while the worker is stopped

            # a second holder takes over (token 2) and judges another memory of the
            # namespace: only the lease stream stands between the first and its append
            runtime.autopilot.leases = Leases(runtime.ledger, runtime.memory.clock, ttl=timedelta(seconds=30))
            assert runtime.autopilot.judge_memory(other.id, other.position, "worker-2").outcome == "judged"
            head = runtime.ledger.head_position()

            os.kill(worker.pid, signal.SIGCONT)
            out, _ = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.kill()
    assert worker.returncode == 3, out
    assert out.splitlines()[-1].startswith("lease_lost")
    assert runtime.ledger.head_position() == head  # the late append left nothing behind
    # the message is redelivered to the lease's holder, which judges the memory once
    second = runtime.autopilot.judge_memory(written.id, written.position, "worker-2")
    assert (second.outcome, second.findings) == ("judged", 1)

    events = [r.event for r in runtime.ledger.read(0, 10_000)]
    judged = [e for e in events if isinstance(e, ConflictsJudged) and e.memory_id == written.id]
    assert [(e.outcome, e.token, e.judge) for e in judged] == [("judged", 3, "rules")]  # 2 judged the other
    assert sum(isinstance(e, FindingOpened) for e in events) == 1
    lease = runtime.ledger.streams([lease_id("autopilot", AGENT.namespace)])
    taken = [
        (e.holder, e.token)
        for e in (r.event for r in next(iter(lease.values())))
        if isinstance(e, LeaseEvent)
    ]
    assert taken[0] == ("worker-1", 1)
    assert ("worker-2", 2) in taken
    assert all(token >= 2 for _, token in taken[taken.index(("worker-2", 2)) :])  # never again token 1
