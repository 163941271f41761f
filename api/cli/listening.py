"""The line ``memwarden serve`` prints once it accepts connections, so a person (or a
script waiting on its output) knows the API is up and where."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable

PROBE_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - names, not binds


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def answers(host: str, port: int) -> bool:
    """True when ``GET /healthz`` on ``host:port`` is a 200 (the app finished starting)."""
    connection = http.client.HTTPConnection(PROBE_HOSTS.get(host, host), port, timeout=1)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def announce_when_listening(
    host: str, port: int, workers: int, write: Callable[[str], None], give_up_after: float = 600.0
) -> threading.Thread:
    """Start a daemon thread that writes one line when the server answers, or nothing if it
    never does within ``give_up_after`` seconds (the server's own errors say why)."""

    def watch() -> None:
        deadline = time.monotonic() + give_up_after
        while time.monotonic() < deadline:
            if answers(host, port):
                plural = "worker" if workers == 1 else "workers"
                write(f"memwarden listening on {base_url(host, port)} ({workers} {plural})\n")
                return
            time.sleep(0.1)

    thread = threading.Thread(target=watch, name="memwarden-listening", daemon=True)
    thread.start()
    return thread
