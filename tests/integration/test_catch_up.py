"""Catch-up throughput without changing what the read models hold: batched statements give
the rows one-event-at-a-time application gives, and a catch-up far behind the head builds
the HNSW index once at the end instead of row by row."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import Cursor

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections import runner as runner_module
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.search import projection as search_module
from memwarden.projections.search.projection import SearchIndexProjection, hnsw_index_name
from memwarden.projections.search.service import SearchQuery

AGENT = Identity("acme/eng", "agent-1", "agent")
PEER = Identity("acme/eng", "agent-2", "agent")
HR = Identity("acme/eng", "hr", "member")
ADMIN = Identity("acme", "lead", "admin")
DEFER_BACKLOG = 50
ODD = ('quote " here', "back\\slash", "comma, brace {x}", " spaced ", "NULL", "ünï\u3000code")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as rt:
        yield rt


def history(rt: Runtime) -> None:
    """Writes, same-batch supersedence, verifications, disputes resolved every way, array
    columns with awkward text, and an erasure: every handler of the batched projections."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(60):
        result = rt.memory.write(
            AGENT,
            WriteMemory(
                content=f"Host {i % 7} runs service {i}",
                subject=f"host-{i % 7}",
                attribute="service",
                value=f"service {i}",
                tags=(ODD[i % len(ODD)], f"t{i}"),
                selectors=(f'stakeholder:"{i % 3}"',),
                event_time=start + timedelta(days=i),
            ),
        )
        if i % 9 == 0 and result.id is not None:
            rt.memory.verify(PEER, VerifyMemory(memory_id=result.id, supports=True))
    rt.memory.write(
        HR,
        WriteMemory(
            content="Dana lives in Oslo",
            subject="dana",
            attribute="city",
            value="Oslo",
            provenance=ProvenanceClaim(source="manual"),
        ),
    )
    for city, decision in (("Rome", "keep_old"), ("Pisa", "edit"), ("Bern", "uphold_new")):
        disputed = rt.memory.write(
            AGENT, WriteMemory(content=f"Dana lives in {city}", subject="dana", attribute="city", value=city)
        )
        assert disputed.dispute_id is not None
        rt.memory.resolve_dispute(
            ADMIN,
            ResolveDispute(
                dispute_id=disputed.dispute_id,
                decision=decision,  # type: ignore[arg-type]
                content="Dana lives in Bergen" if decision == "edit" else None,
            ),
        )
    rt.memory.write(AGENT, WriteMemory(content="Backups run nightly at 02:00"))
    rt.memory.write(PEER, WriteMemory(content="Backups run nightly at 02:00"))  # reaffirmed
    erased = rt.memory.write(
        AGENT, WriteMemory(content="Erin's desk is by the window", selectors=("stakeholder:erin",))
    )
    assert erased.id is not None
    rt.core.erasure.forget(ADMIN, Forget(ids=(erased.id,), reason="request"))
    for i in range(10):
        rt.memory.write(AGENT, WriteMemory(content=f"Release {i} ships on a Tuesday"))


@pytest.mark.slow
def test_batched_projections_hold_what_one_event_at_a_time_gives(runtime: Runtime) -> None:
    history(runtime)
    runtime.reads.runner.catch_up()  # batches of up to a thousand events
    with runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            "SELECT value, tags, selectors FROM memwarden.memory_objects WHERE content LIKE 'Host %%'"
        ).fetchall()
    assert len(rows) == 60
    for row in rows:  # array columns arrive exactly as written, whatever their text
        i = int(row["value"].removeprefix("service "))
        assert row["tags"] == [ODD[i % len(ODD)], f"t{i}"]
        assert row["selectors"] == [f'stakeholder:"{i % 3}"']
    rebuilder = Rebuilder(runtime.reads.runner, batch_size=1)  # no batching at all
    for projection in runtime.reads.runner.projections:
        report = rebuilder.rebuild(projection.name, verify=True, switch=False)
        assert report.differences == [], projection.name


@pytest.fixture
def far_behind(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """The history written with nothing following it, in batches small enough (and a
    deferral threshold low enough) that the catch-up counts as far behind."""
    monkeypatch.setattr(runner_module, "BATCH_SIZE", 10)
    monkeypatch.setattr(search_module, "DEFER_MIN_BACKLOG", DEFER_BACKLOG)
    history(runtime)
    for i in range(DEFER_BACKLOG):  # the erasure in the history waits for the read models
        runtime.memory.write(AGENT, WriteMemory(content=f"Canary build {i} passed its smoke test"))
    return runtime


def test_a_long_catch_up_builds_the_vector_index_once(
    far_behind: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = far_behind
    index = next(p for p in runtime.reads.runner.projections if isinstance(p, SearchIndexProjection))
    assert index.vector_model is not None
    calls: list[tuple[str, Any]] = []
    defer, build = index.defer_indexes, index.build_indexes

    def deferring(curs: Cursor[Any], schema: str, backlog: int) -> bool:
        dropped = defer(curs, schema, backlog)
        calls.append(("defer", dropped))
        return dropped

    def building(curs: Cursor[Any], schema: str) -> None:
        calls.append(("build", index.indexes_deferred(curs, schema)))
        build(curs, schema)

    monkeypatch.setattr(index, "defer_indexes", deferring)
    monkeypatch.setattr(index, "build_indexes", building)
    head = runtime.ledger.head_position()
    assert head - runtime.reads.runner.position() > DEFER_BACKLOG  # far behind: nothing followed the writes
    assert runtime.reads.runner.catch_up() == head
    assert ("defer", True) in calls
    assert calls[-1] == ("build", True)  # built once, at the end
    assert [c for c in calls if c[0] == "build"] == [("build", True)]
    name = f"memwarden.{hnsw_index_name(index.vector_model[0])}"
    with runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (name,)).fetchone()
    assert row is not None
    assert row["present"]
    # the same rows as a rebuild, and the vector lane answers through the rebuilt graph
    report = Rebuilder(runtime.reads.runner).rebuild("search_index", verify=True)
    assert report.differences == []
    answer = runtime.reads.search.search(AGENT, SearchQuery(query="when are backups taken?", k=1), "vector")
    assert "Backups" in (answer.results[0].content or "")


def test_a_reader_helping_to_its_own_write_defers_nothing(far_behind: Runtime) -> None:
    runtime = far_behind
    head = runtime.ledger.head_position()
    runtime.reads.runner.catch_up(head - 5)  # what read-your-writes does when nothing projects
    index = next(p for p in runtime.reads.runner.projections if isinstance(p, SearchIndexProjection))
    with runtime.ledger.datastore.get_connection() as conn, conn.cursor() as curs:
        assert not index.indexes_deferred(curs, "memwarden")
