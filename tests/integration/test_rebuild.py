"""Operators' rebuilds: from position zero into fresh tables while the live ones serve,
then one atomic switch; ``verify`` compares the rebuilt model with the live one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import Cursor

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.commands import ProvenanceClaim, VerifyMemory, WriteMemory
from memwarden.domain.model.events import MemoryVerified
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.memory_objects.projection import MemoryObjectsProjection
from memwarden.projections.rebuild import Rebuilder, RebuildFailed

AGENT = Identity("acme/eng", "agent-1", "agent")
PEER = Identity("acme/eng", "agent-2", "agent")
HR = Identity("acme/eng", "hr", "member")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as rt:
        yield rt


def populate(runtime: Runtime, n: int = 120) -> int:
    position = 0
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n):
        result = runtime.memory.write(
            AGENT,
            WriteMemory(
                content=f"Host {i % 40} runs service {i}",
                subject=f"host-{i % 40}",
                attribute="service",
                value=f"service {i}",
                event_time=start + timedelta(days=i),
            ),
        )
        position = result.position
        if i % 10 == 0 and result.id is not None:
            position = runtime.memory.verify(PEER, VerifyMemory(memory_id=result.id, supports=True)).position
    position = runtime.memory.write(
        HR, WriteMemory(content="Backups are encrypted", provenance=ProvenanceClaim(source="manual"))
    ).position
    runtime.reads.runner.catch_up()
    return position


COUNTS = (
    "SELECT (SELECT count(*) FROM memwarden.memory_objects) AS objects,"
    " (SELECT count(*) FROM memwarden.memory_supersedence) AS edges,"
    " (SELECT count(*) FROM memwarden.memory_objects WHERE trust_tier = 'verified') AS verified,"
    " (SELECT count(*) FROM memwarden.memory_timeline) AS intervals"
)


def counts(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    row = conn.execute(COUNTS).fetchone()
    assert row is not None
    return tuple(int(v) for v in row)


def test_reads_during_a_rebuild_never_see_a_half_built_model(runtime: Runtime) -> None:
    populate(runtime)
    conninfo = runtime.core.params.conninfo()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        expected = counts(conn)
    assert expected[0] > 100
    assert expected[1] > 50
    seen: list[tuple[int, ...]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                while not stop.is_set():
                    seen.append(counts(conn))
        except BaseException as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        rebuilder = Rebuilder(runtime.reads.runner, batch_size=25)
        reports = [rebuilder.rebuild(name, verify=True) for name in ("memory_objects", "memory_timeline")]
        reports.append(rebuilder.rebuild("memory_objects"))
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert len(seen) > 20
    assert set(seen) == {expected}, "a reader saw a model that was not the whole one"
    for report in reports:
        assert report.switched
        assert report.differences == []
        assert report.events == runtime.ledger.head_position()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert counts(conn) == expected
    status = {s.name: s for s in runtime.reads.runner.status()}
    assert status["memory_objects"].position == runtime.ledger.head_position()
    # the runner carries on from the switched tracking record
    last = runtime.memory.write(AGENT, WriteMemory(content="After the rebuild, writes still project"))
    runtime.reads.wait_for(last.position)
    assert last.id is not None
    assert runtime.reads.read(AGENT, last.id) is not None


def test_verify_reports_a_live_model_that_drifted(runtime: Runtime) -> None:
    populate(runtime, 20)
    with runtime.ledger.datastore.get_connection() as conn:
        conn.execute(
            "UPDATE memwarden.memory_objects SET content = 'tampered' WHERE id ="
            " (SELECT id FROM memwarden.memory_objects ORDER BY id LIMIT 1)"
        )
        conn.commit()
    rebuilder = Rebuilder(runtime.reads.runner)
    report = rebuilder.rebuild("memory_objects", verify=True, switch=False)
    assert not report.switched
    assert any("only in the live" in d for d in report.differences)
    assert any("tampered" in d for d in report.differences)
    fixed = rebuilder.rebuild("memory_objects", verify=True)
    assert fixed.differences  # the drift is reported, and the switch repairs it
    assert rebuilder.rebuild("memory_objects", verify=True).differences == []
    with runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            "SELECT count(*) AS n FROM memwarden.memory_objects WHERE content = 'tampered'"
        ).fetchone()
    assert row is not None
    assert row["n"] == 0


class _Poisoned(MemoryObjectsProjection):
    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        for recorded in events:
            if isinstance(recorded.event, MemoryVerified):
                raise TypeError("cannot process verification")
        super().apply(curs, schema, events)


def test_a_rebuild_that_meets_a_poison_event_leaves_the_live_model_alone(runtime: Runtime) -> None:
    populate(runtime, 12)
    conninfo = runtime.core.params.conninfo()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        before = counts(conn)
    runner = runtime.reads.runner
    runner.projections = [_Poisoned() if p.name == "memory_objects" else p for p in runner.projections]
    with pytest.raises(RebuildFailed) as failed:
        Rebuilder(runner, batch_size=7).rebuild("memory_objects")
    first_verification = next(
        r.position for r in runtime.ledger.read(0, 10_000) if isinstance(r.event, MemoryVerified)
    )
    assert failed.value.position == first_verification
    with psycopg.connect(conninfo, autocommit=True) as conn:
        assert counts(conn) == before
        leftover = conn.execute(
            "SELECT count(*) AS n FROM pg_namespace WHERE nspname LIKE 'memwarden__rebuild%%'"
        ).fetchone()
    assert leftover is not None
    assert leftover[0] == 0
