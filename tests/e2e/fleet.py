"""Real `memwarden` processes for the fault and multi-process tests: started with their
output in log files, killed or stopped by the test, all gone at the end; the CLI's
ledger and projection checks; a client that records what every answer was."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import psycopg

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.events import ConflictsJudged
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from tests.processes import REPO_ROOT, free_port, ready, start_redis, wait_until


class Fleet:
    """The processes one test started; ``close`` stops whatever is still running."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._runs: dict[str, int] = {}

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``memwarden ARGS`` as ``name``; a name started again gets a fresh log of its own."""
        run = self._runs[name] = self._runs.get(name, 0) + 1
        with (self.logs / f"{name}.{run}.log").open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "memwarden.api.cli.main", *args],
                cwd=REPO_ROOT,
                env={**self.env, **(env or {})},
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        self.processes[name] = process
        return process

    def serve(self, name: str, *args: str, port: int | None = None, env: dict[str, str] | None = None) -> str:
        """A ``memwarden serve`` on ``port`` (a free one by default), once it is ready."""
        port = port or free_port()
        self.start(name, "serve", "--port", str(port), *args, env=env)
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: ready(base) or self.processes[name].poll() is not None, 120)
        assert self.processes[name].poll() is None, self.log(name)
        return base

    def worker(self, name: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        process = self.start(name, "worker", "--threads", "2", env=env)
        wait_until(lambda: "memwarden worker: running" in self.log(name) or process.poll() is not None, 120)
        assert process.poll() is None, self.log(name)
        return process

    def kill(self, name: str) -> None:
        """``kill -9``: no clean shutdown, nothing flushed."""
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(30)

    def stop(self, name: str) -> int:
        process = self.processes[name]
        if process.poll() is None:
            process.terminate()
        return _reaped(process)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.{self._runs[name]}.log").read_text(errors="replace")

    def logs_text(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')}" for p in sorted(self.logs.glob("*.log"))
        )

    def close(self) -> None:
        """Stop every process still running: all asked at once, so their shutdowns overlap."""
        running = [p for p in self.processes.values() if p.poll() is None]
        for process in running:
            process.terminate()
        for process in running:
            _reaped(process)

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memwarden.api.cli.main", *args],
            cwd=REPO_ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def assert_ledger_and_read_models_agree(self) -> None:
        """The chain verifies, and every read model rebuilt from the ledger equals the live one."""
        verified = self.cli("ledger", "verify")
        assert verified.returncode == 0, verified.stdout + verified.stderr
        rebuilt = self.cli("projections", "rebuild", "--verify", "--no-switch")
        assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
        assert "DIFFERENCES" not in rebuilt.stdout, rebuilt.stdout


def _reaped(process: subprocess.Popen[bytes]) -> int:
    """The exit code of a process asked to stop: killed if it takes more than a minute."""
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
    return int(process.returncode)


@contextlib.contextmanager
def fleet(env: dict[str, str], logs: Path) -> Iterator[Fleet]:
    started = Fleet(env, logs)
    try:
        yield started
    finally:
        started.close()


@dataclass
class Answer:
    what: str
    status: int
    code: str | None
    retry_after: str | None
    seconds: float
    body: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """Every answer the clients saw (status 0: no answer, the connection failed)."""

    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self._lock = threading.Lock()

    def call(self, client: httpx.Client, what: str, path: str, body: dict[str, Any]) -> Answer:
        began = time.monotonic()
        try:
            response = client.post(path, json=body)
        except httpx.HTTPError:
            answer = Answer(what, 0, None, None, time.monotonic() - began)
        else:
            payload: dict[str, Any] = {}
            with contextlib.suppress(ValueError):
                decoded = response.json()
                payload = decoded if isinstance(decoded, dict) else {}
            code = payload.get("error") if response.status_code >= 400 else None
            answer = Answer(
                what,
                response.status_code,
                code,
                response.headers.get("retry-after"),
                time.monotonic() - began,
                payload,
            )
        with self._lock:
            self.answers.append(answer)
        return answer

    def of(self, what: str) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.what == what]


def client(base: str, key: str, timeout: float = 30) -> httpx.Client:
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def redis_server(port: int, logs: Path) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own on ``port``, nothing persisted, once it answers."""
    return start_redis(port, logs / f"redis-{port}.log")


def base_env(database_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "MEMWARDEN_DATA_DIR": str(data_dir),
        "MEMWARDEN_EMBEDDER": "hash",
        "MEMWARDEN_RERANK": "none",
        **extra,
    }


def ledger_events(settings: Settings) -> list[object]:
    """Every event on the ledger, in order (a runtime of the test's, projecting nothing)."""
    with Runtime(settings, follow=False) as runtime:
        events: list[object] = []
        after = 0
        while batch := runtime.ledger.read(after, 5000):
            events.extend(r.event for r in batch)
            after = int(batch[-1].position or 0)
        return events


def judged(settings: Settings) -> Counter[UUID]:
    """How often each memory was judged by the conflict autopilot."""
    return Counter(
        e.memory_id
        for e in ledger_events(settings)
        if isinstance(e, ConflictsJudged) and e.outcome == "judged"
    )


def deployment_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a deployment's processes on the test's database and keys: the
    test's Redis (``settings.redis_url`` unless ``extra`` names another), Redis shared
    state, and leases and heartbeats short enough for a test to outlive them."""
    extra.setdefault("REDIS_URL", settings.redis_url or "")
    return base_env(
        settings.database_url or "",
        settings.data_dir,
        MEMWARDEN_SHARED_STATE="redis",
        MEMWARDEN_LEASE_SECONDS="2",
        MEMWARDEN_WORKER_HEARTBEAT_SECONDS="2",
        **extra,
    )


def limit_tenant(settings: Settings, tenant: str, per_minute: int) -> None:
    """The tenant's operator sets its keys' rate limit."""
    with Runtime(settings, follow=False) as runtime:
        operator = Identity(tenant, "operator@test", "owner")
        runtime.core.governance.set_policy(operator, tenant, PolicyBody(rate_limit_per_minute=per_minute))


@contextlib.contextmanager
def read_only(database: ConnectionParams) -> Iterator[None]:
    """The service's role may only read this database while inside: its transactions are
    read only there (``ALTER ROLE .. IN DATABASE``: the test's role is a superuser, whose
    privileges cannot be revoked), and the connections it had are cut, so every new one is
    refused writes as a read-only standby or a full disk would refuse them."""

    def configure(value: str) -> None:
        # from another database: this one's sessions are read only once the setting is on
        with psycopg.connect(database.with_dbname("postgres").conninfo(), autocommit=True) as conn:
            conn.execute(
                f'ALTER ROLE "{database.user}" IN DATABASE "{database.dbname}"'
                f" SET default_transaction_read_only = {value}"
            )
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (database.dbname,),
            )

    configure("on")
    try:
        yield
    finally:
        configure("off")
