"""A database that fails: every library layer's failure is a fast 503, an outage never
stops a projection and is logged once, and a stop cleared by a rebuild elsewhere is
followed again by a runner that is already running."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from eventsourcing import persistence
from eventsourcing.postgres import PostgresDatastore
from psycopg import Cursor

from memwarden.api.http.errors import Unavailable, classify
from memwarden.bootstrap.core import open_core
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer, unavailable
from memwarden.domain.ledger.group_commit import GroupCommitter
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.commands import VerifyMemory, WriteMemory
from memwarden.domain.model.events import MemoryVerified
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.disputes.projection import DisputesProjection
from memwarden.projections.memory_objects.projection import MemoryObjectsProjection
from memwarden.projections.reads import ReadModels
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.runner import ProjectionLag
from tests.processes import TIMED

AGENT = Identity("acme/eng", "agent-1", "agent")
PEER = Identity("acme/eng", "agent-2", "agent")


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")


def _caught(action: Any) -> Exception:
    try:
        action()
    except Exception as error:
        return error
    raise AssertionError("no error")


def _nowhere(tmp_path: Path) -> ConnectionParams:
    """A server that is not there: a socket directory no postmaster listens in."""
    return ConnectionParams(dbname="memwarden", host=str(tmp_path), port="5432", user="postgres", password="")


def _datastore(params: ConnectionParams) -> PostgresDatastore:
    return PostgresDatastore(
        params.dbname, params.host, params.port, params.user, params.password, connect_timeout=1
    )


@TIMED
def test_a_pool_that_cannot_connect_is_a_503_within_its_timeout(tmp_path: Path) -> None:
    datastore = _datastore(_nowhere(tmp_path))
    began = time.monotonic()

    def use() -> None:
        with datastore.get_connection() as conn:
            conn.execute("SELECT 1")

    error = _caught(use)
    took = time.monotonic() - began
    datastore.close()
    assert isinstance(error, persistence.OperationalError)  # eventsourcing's, not psycopg's
    assert not isinstance(error, psycopg.Error)
    assert took < 3, f"a request waited {took:.1f} s for a database that is down"
    status, code, _detail, headers = classify(error)
    assert (status, code) == (503, "unavailable")
    assert int(headers["Retry-After"]) >= 1


def test_psycopg_failures_to_connect_and_lost_connections_are_503(
    tmp_path: Path, database: ConnectionParams
) -> None:
    refused = _caught(lambda: psycopg.connect(_nowhere(tmp_path).conninfo(), connect_timeout=1))
    assert isinstance(refused, psycopg.OperationalError)
    assert classify(refused)[:2] == (503, "unavailable")

    # a connection the server ends (a restart, an admin) fails at its next use
    datastore = _datastore(database)
    try:
        with datastore.get_connection() as conn:
            pid = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]  # type: ignore[index]
            with psycopg.connect(database.conninfo(), autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            lost = _caught(lambda: conn.execute("SELECT 1"))
    except persistence.PersistenceError as wrapped:  # the library wraps it on the way out
        lost = wrapped
    finally:
        datastore.close()
    assert unavailable(lost)
    assert classify(lost)[:2] == (503, "unavailable")


def test_a_statement_that_is_wrong_stays_a_500(database: ConnectionParams) -> None:
    """Only the database's failures are a 503: a bug is not something to retry."""
    datastore = _datastore(database)

    def run(statement: str) -> None:
        with datastore.get_connection() as conn:
            conn.execute(statement)

    try:
        for statement in ("SELECT 1 / 0", "SELECT * FROM no_such_table"):
            error = _caught(lambda s=statement: run(s))
            assert isinstance(error, persistence.PersistenceError)
            assert not unavailable(error)
            assert classify(error)[:2] == (500, "internal")
    finally:
        datastore.close()


def _messages(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_a_follower_that_cannot_reach_the_database_logs_once_and_once_when_back(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with Runtime(settings, follow=False) as runtime:
        reads = ReadModels(runtime.ledger, _nowhere(tmp_path).conninfo(), [DisputesProjection()], 0.5)
        runner = reads.runner
        caplog.set_level(logging.INFO, logger="memwarden.projections.followers")
        runner.start()
        try:
            deadline = time.monotonic() + 10
            while len(caplog.records) == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(2.0)  # about four retries
            assert len(_messages(caplog, "projector: database unavailable")) == 1, caplog.text
            assert "Traceback" not in caplog.text
            runner.listen_conninfo = runtime.core.params.conninfo()  # the database is back
            deadline = time.monotonic() + 10
            while not _messages(caplog, "recovered") and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            runner.stop()
    recovered = _messages(caplog, "projector: recovered after")
    assert len(recovered) == 1, caplog.text
    retries = int(recovered[0].split("after ")[1].split(" ")[0])
    assert retries >= 3
    assert len(_messages(caplog, "database unavailable")) == 1


class _Poisoned(MemoryObjectsProjection):
    """Fails on any verification event: stands for a bug in a projection."""

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        if any(isinstance(r.event, MemoryVerified) for r in events):
            raise TypeError("cannot process verification")
        super().apply(curs, schema, events)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as opened:
        yield opened


def test_a_rebuild_elsewhere_clears_the_stop_of_a_running_runner(runtime: Runtime) -> None:
    first = runtime.memory.write(AGENT, WriteMemory(content="Incidents are reviewed on Fridays"))
    assert first.id is not None
    verified = runtime.memory.verify(PEER, VerifyMemory(memory_id=first.id, supports=True))
    conninfo = runtime.core.params.conninfo()
    running = ReadModels(runtime.ledger, conninfo, [_Poisoned(), DisputesProjection()], 0.5)
    with runtime.ledger.datastore.get_connection() as conn:
        conn.execute("TRUNCATE memwarden.memory_objects, memwarden.memory_supersedence, memwarden.disputes")
        conn.execute("DELETE FROM memwarden.projection_tracking")
    # an API process whose reader helped the projector and hit the same stop
    helper = ReadModels(runtime.ledger, conninfo, [_Poisoned(), DisputesProjection()], 0.5)
    helper.runner.catch_up()
    assert helper.runner.errors["memory_objects"].position == verified.position - 1
    running.runner.start()  # the projector of a process that keeps running
    try:
        deadline = time.monotonic() + 15
        while "memory_objects" not in running.runner.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        assert running.runner.errors["memory_objects"].position == verified.position - 1

        # The fixed code, in another process (the CLI): a rebuild carries it past the stop.
        fixed = ReadModels(runtime.ledger, conninfo, [MemoryObjectsProjection(), DisputesProjection()], 0.5)
        report = Rebuilder(fixed.runner).rebuild("memory_objects")
        assert report.switched
        assert report.position >= verified.position

        later = runtime.memory.write(AGENT, WriteMemory(content="Postmortems are blameless"))
        assert later.id is not None
        # the running runner follows memory_objects again, without a restart
        running.runner.wait_for(later.position, timeout=10)
        assert "memory_objects" not in running.runner.errors
        assert running.read(AGENT, later.id) is not None
        assert all(s.error is None for s in running.runner.status())
        # the helper applies nothing more, yet reports (and /readyz) no stop either
        assert all(s.error is None for s in helper.runner.status())
    finally:
        running.runner.stop()


def _can_connect(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


@pytest.mark.slow
def test_the_embedded_server_is_started_again_after_its_postmaster_is_killed(tmp_path: Path) -> None:
    """Two users of one data directory: the postmaster dies (kill -9 leaves its pid file
    behind); one of them starts it again on the same socket, and both keep using it."""
    data_dir = tmp_path / "mw"
    first, second = EmbeddedServer(data_dir, watch_seconds=0.2), EmbeddedServer(data_dir, watch_seconds=0.2)
    url = first.start()
    try:
        assert second.start() == url
        killed = int((data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not (first.running() and _can_connect(url)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _can_connect(url), "the server was not started again"
        restarted = int((data_dir / "pg" / "postmaster.pid").read_text().split("\n", 1)[0])
        assert restarted != killed
        assert second.running()
    finally:
        second.stop()
        first.stop()
    assert not _can_connect(url), "the last user's stop() left the server running"


def test_an_append_that_finds_the_database_down_fails_the_writers_queued_behind_it(tmp_path: Path) -> None:
    """Each writer answers after one connection timeout, not after every batch before it."""
    calls: list[int] = []
    started = threading.Event()

    def commit(groups: Sequence[str]) -> list[str]:
        calls.append(len(groups))
        if len(calls) == 1:
            started.set()
            time.sleep(0.5)  # the first batch waits for a connection …
            error = _caught(lambda: psycopg.connect(_nowhere(tmp_path).conninfo(), connect_timeout=1))
            raise persistence.OperationalError(str(error)) from error  # … and gets none
        return list(groups)

    committer: GroupCommitter[str, str] = GroupCommitter(commit, fails_queue=unavailable)
    outcomes: dict[str, str] = {}

    def write(name: str) -> None:
        try:
            outcomes[name] = committer.submit(name)
        except persistence.OperationalError:
            outcomes[name] = "unavailable"

    leader = threading.Thread(target=write, args=("leader",))
    leader.start()
    started.wait(5)
    queued = [threading.Thread(target=write, args=(f"queued-{n}",)) for n in range(3)]
    for thread in queued:
        thread.start()
    for thread in [leader, *queued]:
        thread.join(10)
    assert calls == [1], "the queued writers waited for the database again"
    assert set(outcomes.values()) == {"unavailable"}
    assert len(outcomes) == 4
    # the database is back: the next writer commits as usual
    assert committer.submit("later") == "later"


def test_the_database_timeout_is_configured_and_checked() -> None:
    assert Settings.from_env({"MEMWARDEN_DB_TIMEOUT_SECONDS": "1.5"}).db_timeout_seconds == 1.5
    assert Settings.from_env({}).db_timeout_seconds == 3.0
    for bad in ("0", "-2", "soon", "nan"):
        with pytest.raises(ValueError, match="MEMWARDEN_DB_TIMEOUT_SECONDS"):
            Settings.from_env({"MEMWARDEN_DB_TIMEOUT_SECONDS": bad})


def test_every_503_says_when_to_come_back() -> None:
    for error in (Unavailable("the rebuild failed"), ProjectionLag(10, 5), TimeoutError()):
        status, _code, _detail, headers = classify(error)
        assert status == 503
        assert int(headers["Retry-After"]) >= 1


def test_sessions_read_times_in_utc_whatever_the_database_default_zone(
    database: ConnectionParams, settings: Settings
) -> None:
    """The read models clamp times to years 1-9999 in UTC; a session in a zone west of UTC
    could not read the earliest of them back (``timestamp too small``, a 500)."""
    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        conn.execute(f"ALTER DATABASE \"{database.dbname}\" SET timezone = 'America/New_York'")
    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_setting('TimeZone'), '0001-01-01 00:00+00'::timestamptz"
        ).fetchone()
    assert row is not None
    assert row[0] == "UTC"
    assert row[1].year == 1
    with open_core(settings) as core, core.ledger.datastore.get_connection() as pooled:
        pooled_row = pooled.execute("SELECT current_setting('TimeZone') AS zone").fetchone()
    assert pooled_row is not None
    assert pooled_row["zone"] == "UTC"  # the ledger's pool too
