"""Watching real processes from e2e tests: waiting for a condition, liveness by /proc."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO_ROOT = Path(__file__).resolve().parents[1]


def wait_until(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its parent to reap it."""
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@contextmanager
def serving(env: dict[str, str], host: str = "127.0.0.1") -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real ``memwarden serve`` on a free loopback port, ready; its base URL names ``host``
    (``localhost`` for a browser that keeps Secure cookies there). Stopped on the way out."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "api.cli", "serve", "--port", str(port)], cwd=REPO_ROOT, env=env
    )
    base = f"http://{host}:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(ready, 120)
        yield server, base
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=30)
