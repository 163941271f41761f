"""Watching real processes from e2e tests: waiting for a condition, liveness by /proc."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

import httpx
import pytest

T = TypeVar("T")

METRICS_TOKEN = "test-metrics-token"
"""The operator's /metrics token of every process the tests start (tests/conftest.py)."""
METRICS_AUTH = {"Authorization": f"Bearer {METRICS_TOKEN}"}

TIMED = pytest.mark.xdist_group("timed")
"""Tests that must not overlap each other under ``pytest -n`` (``--dist loadgroup``: one
worker runs them one after another): the load benches, and the tests that bound how long an
answer takes while they stop databases, cut Redis or kill processes. They still overlap the
lighter tests on the other workers."""


def eventually(probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """The probe's first truthy answer, asked every 0.1 s until ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError("not reached in time")


def wait_until(condition: Callable[[], bool], seconds: float = 30) -> None:
    eventually(lambda: condition() or None, seconds)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


REPO_ROOT = Path(__file__).resolve().parents[1]


def cli_last_line(env: dict[str, str], *args: str) -> str:
    """The last line a ``memwarden`` command printed (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return done.stdout.strip().splitlines()[-1]


def cli_key(env: dict[str, str], namespace: str, actor: str, role: str) -> str:
    """A key made by ``memwarden keys create`` (the key is alone on its last line)."""
    return cli_last_line(env, "keys", "create", namespace, actor, role)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def redis_answers(port: int) -> bool:
    import redis  # noqa: PLC0415 - only the tests that start a Redis

    try:
        return bool(redis.Redis(port=port, socket_timeout=0.5).ping())
    except redis.RedisError:
        return False


def start_redis(port: int, log: Path) -> subprocess.Popen[bytes]:
    """A redis-server of the test's own on ``port`` (loopback, nothing persisted, so a
    restart loses whatever was queued), once it answers; its output appended to ``log``.
    Tests never use a Redis they did not start: whatever answers on 127.0.0.1:6379 may be
    anyone's."""
    with log.open("ab") as output:
        process = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    wait_until(lambda: redis_answers(port) or process.poll() is not None, 30)
    assert process.poll() is None, log.read_text(errors="replace")
    return process


def ready(base: str) -> bool:
    """Does the served API at ``base`` answer ``/readyz`` with 200?"""
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def serving(
    env: dict[str, str], host: str = "127.0.0.1", log: IO[bytes] | None = None, flags: tuple[str, ...] = ()
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``memwarden serve`` (with ``flags``) on a free loopback port, ready; its base URL
    names ``host`` (``localhost`` for a browser that keeps Secure cookies there); its output
    goes to ``log`` when given. Stopped on the way out."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "memwarden.api.cli.main", "serve", "--port", str(port), *flags],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
    )
    base = f"http://{host}:{port}"
    try:
        wait_until(lambda: ready(base), 120)
        yield server, base
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=30)
