"""Passes that cannot silently stop (issue 25): with ``REDIS_URL`` set, ``/readyz``, the
``stats`` route, ``/metrics`` and ``memwarden stats`` say when no worker consumes the
passes; a real ``memwarden worker`` (on the session's own Redis) makes them fine, and its
SIGKILL makes them say so again once its heartbeat is stale. Without ``REDIS_URL`` the API
runs the passes itself and probes no Redis."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import Settings
from memwarden.workers.actors import declare_autopilot, holder_id, redis_broker
from memwarden.workers.heartbeats import Consumption, Heartbeat, PassesProbe
from tests.conftest import on_redis, url_of
from tests.e2e.api_helpers import Api
from tests.e2e.fleet import Fleet, base_env, fleet
from tests.processes import METRICS_AUTH, REPO_ROOT, TIMED, eventually

STALE = 5.0
"""Short enough for a test to outlive, long enough that a busy worker never looks idle."""


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    return msgspec.structs.replace(on_redis(settings, redis_url), worker_stale_seconds=STALE)


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[Fleet]:
    env = base_env(
        settings.database_url or "",
        settings.data_dir,
        REDIS_URL=settings.redis_url or "",
        MEMWARDEN_WORKER_STALE_SECONDS=str(STALE),
        MEMWARDEN_LOG_FORMAT="json",
    )
    with fleet(env, tmp_path / "logs") as started:
        yield started


def readiness(api: Api) -> dict[str, Any]:
    answer = api.client.get("/readyz")
    assert answer.status_code == 200  # reads and writes work: the passes are delayed, not lost
    body: dict[str, Any] = answer.json()
    return body


def consuming_gauge(api: Api) -> float | None:
    text = api.client.get("/metrics", headers=METRICS_AUTH).text
    found = re.search(r'^memwarden_passes_consuming\{runner="redis"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def pass_line(log: str, pass_name: str) -> dict[str, Any] | None:
    """The first JSON line of a worker's log about a ``pass_name`` pass."""
    for text in log.splitlines():
        if text.startswith("{"):
            line: dict[str, Any] = json.loads(text)
            if line.get("pass") == pass_name:
                return line
    return None


def cli_stats(workers: Fleet) -> tuple[int, dict[str, Any]]:
    done = workers.cli("stats", "--json", timeout=120)
    return done.returncode, json.loads(done.stdout.strip().splitlines()[-1])


@TIMED
def test_no_worker_is_said_everywhere_a_worker_makes_it_fine_and_its_kill_is_said_again(
    api: Api, workers: Fleet
) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    body = readiness(api)
    assert body["status"] == "degraded"
    assert body["passes"]["runner"] == "redis"
    assert body["passes"]["consuming"] is False
    assert "no worker has sent a heartbeat" in body["detail"]
    stats = api.mem(agent, "stats").json()
    assert stats["passes"]["consuming"] is False
    assert consuming_gauge(api) == 0.0
    code, printed = cli_stats(workers)
    assert code == 1
    assert printed["passes"]["consuming"] is False

    workers.worker("worker")
    eventually(lambda: readiness(api)["status"] == "ready", 60)
    assert readiness(api)["passes"]["workers"] == 1
    assert api.mem(agent, "stats").json()["passes"]["consuming"] is True
    assert consuming_gauge(api) == 1.0
    assert "memwarden_workers_alive 1" in api.client.get("/metrics", headers=METRICS_AUTH).text
    assert cli_stats(workers)[0] == 0

    written = api.mem(agent, "write", {"content": "The deploy window opens at 14:00 on Tuesdays"})
    assert written.status_code == 200
    line = eventually(lambda: pass_line(workers.log("worker"), "autopilot"), 60)  # one JSON line per pass
    assert line["namespace"] == "acme/eng"
    assert line["result"] == "done"
    assert isinstance(line["position"], int)
    assert line["duration_ms"] >= 0

    workers.kill("worker")
    eventually(lambda: readiness(api)["status"] == "degraded", 30)
    assert api.mem(agent, "stats").json()["passes"]["consuming"] is False
    assert consuming_gauge(api) == 0.0


def test_a_worker_that_beats_but_consumes_nothing_while_messages_wait_is_not_consuming(
    settings: Settings,
) -> None:
    """A wedged worker: alive (its heartbeat thread writes its key) but its actors take
    nothing, while messages wait. After the stale time it does not count as consuming."""
    assert settings.redis_url is not None
    client = redis.Redis.from_url(settings.redis_url)
    broker = redis_broker(settings)
    beat = Heartbeat(settings, client, holder_id(), Consumption())
    beat.start()
    try:
        broker.flush_all()
        probe = PassesProbe(settings)
        assert probe.health().consuming  # beating, nothing waits
        actor = declare_autopilot(broker, lambda: None, "sender")  # type: ignore[arg-type, return-value]
        actor.send("00000000-0000-0000-0000-000000000000", 1)
        time.sleep(STALE + 1.2)  # past the stale time and the probe's cache
        found = probe.health()
        assert found.workers == 1
        assert found.queued == 1
        assert not found.consuming
        assert found.detail is not None
        assert "no worker has consumed one" in found.detail
    finally:
        beat.stop()
        broker.flush_all()
        broker.close()
    assert not client.exists(beat.key)  # a clean stop takes its key away


def test_without_redis_url_the_api_runs_the_passes_and_says_so(
    tmp_path: Path, database: ConnectionParams
) -> None:
    unset = Settings.from_env({"DATABASE_URL": url_of(database), "MEMWARDEN_DATA_DIR": str(tmp_path / "d")})
    assert unset.redis_url is None
    with Runtime(unset) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        body = client.get("/readyz").json()
    assert body["status"] == "ready"
    assert body["passes"] == {
        "runner": "in-process",
        "consuming": True,
        "workers": None,
        "queued": None,
        "idle_seconds": None,
        "detail": None,
    }


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        (["worker"], "REDIS_URL is not set"),
        (["serve", "--workers", "2", "--port", "1"], "--workers above 1 needs REDIS_URL"),
    ],
    ids=["worker", "several-api-processes"],
)
def test_what_needs_redis_refuses_to_start_without_redis_url(
    tmp_path: Path, command: list[str], refusal: str
) -> None:
    env = base_env("", tmp_path / "d")
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", *command],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert refusal in done.stderr
