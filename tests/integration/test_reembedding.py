"""Switching the embedder of an existing ledger: the re-embedding pass appends every memory's
vector of the new model (sealed like the old), the index keeps serving the old vectors until
the pass adopts the new model, and then serves the new ones; erasure, rebuilds and a second
run behave. Two hashing models stand for the old and the new embedder (384 and 256
dimensions: a query of one against vectors of the other fails loudly)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import msgspec
import psycopg
import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.events import EmbeddingModelAdopted, MemoryReembedded, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.search.projection import hnsw_index_name
from memwarden.projections.search.service import SearchQuery

OLD, NEW = "feature-hash-v1-384", "feature-hash-v1-256"
AGENT = Identity("acme/eng", "agent-1", "agent")
OTHER = Identity("globex/ops", "agent-2", "agent")
ADMIN = Identity("acme/eng", "alice", "admin")
OPERATOR = "operator@test"
FACTS = [f"Service {n} stores its logs in bucket zeta{n}" for n in range(10)]


class Halfway(Exception):
    pass


@pytest.fixture
def old_ledger(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, UUID]:
    """A ledger written with the old model: memories in two tenants."""
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    ids: dict[str, UUID] = {}
    with Runtime(settings, follow=False) as rt:
        for n, fact in enumerate(FACTS):
            result = rt.memory.write(AGENT if n % 2 else OTHER, WriteMemory(content=fact))
            assert result.id is not None
            ids[fact] = result.id
        rt.reads.runner.catch_up()
    return ids


@pytest.fixture
def new_runtime(settings: Settings, old_ledger: dict[str, UUID]) -> Iterator[Runtime]:
    """A process configured with the new model, on the old ledger."""
    with Runtime(msgspec.structs.replace(settings, embedder="hash-256"), follow=False) as rt:
        yield rt


def fresh_serving(rt: Runtime) -> tuple[str, int] | None:
    rt.reads.search._serving.clear()  # what a process sees a few seconds later
    return rt.reads.search.serving().model


def found(rt: Runtime, identity: Identity, query: str) -> list[str]:
    answer = rt.reads.search.search(identity, SearchQuery(query=query, k=3), after=rt.ledger.head_position())
    assert not answer.degraded
    return [r.content or "" for r in answer.results]


def vector_lane(rt: Runtime, identity: Identity, query: str) -> list[UUID]:
    """The refs the vector lane alone finds, by the served model's query vector."""
    search = rt.reads.search
    serving = search.serving()
    vector = search.embed_later(query, serving)
    with search.view(identity, SearchQuery(query=query, k=3), vector, serving) as (view, *_):
        return [h.ref for h in view.vector_lane(3)]


def models_of_docs(rt: Runtime) -> dict[UUID, str | None]:
    with rt.ledger.datastore.get_connection() as conn:
        rows = conn.execute("SELECT ref, model FROM memwarden.search_docs WHERE kind = 'memory'").fetchall()
    return {r["ref"]: r["model"] for r in rows}


def aside(rt: Runtime) -> set[tuple[UUID, str]]:
    with rt.ledger.datastore.get_connection() as conn:
        rows = conn.execute("SELECT ref, model FROM memwarden.search_vectors").fetchall()
    return {(r["ref"], r["model"]) for r in rows}


def events_of(rt: Runtime, kind: type[Any]) -> list[Any]:
    return [r.event for r in rt.ledger.read(0, 100_000) if isinstance(r.event, kind)]


def test_the_index_serves_the_old_vectors_until_the_new_ones_are_all_in(
    new_runtime: Runtime, old_ledger: dict[str, UUID]
) -> None:
    rt = new_runtime
    assert fresh_serving(rt) == (OLD, 384)  # the ledger's fact, not the configuration
    assert found(rt, AGENT, "bucket zeta3")[0] == FACTS[3]
    assert rt.reembed.missing() == len(FACTS)

    def stop(done: int) -> None:
        if done >= 3:
            raise Halfway

    with pytest.raises(Halfway):
        rt.reembed.run(OPERATOR, batch=3, progress=stop)
    rt.reads.runner.catch_up()
    assert len(aside(rt)) == 3
    assert {m for _, m in aside(rt)} == {NEW}
    assert set(models_of_docs(rt).values()) == {OLD}
    assert fresh_serving(rt) == (OLD, 384)
    assert vector_lane(rt, AGENT, FACTS[5])[0] == old_ledger[FACTS[5]]  # by the old vectors
    assert found(rt, OTHER, "bucket zeta4")[0] == FACTS[4]

    # written midway: embedded by the served (old) model, re-embedded by the pass
    midway = rt.memory.write(AGENT, WriteMemory(content="The midway cache lives on host omega"))
    assert midway.id is not None
    written = [e for e in events_of(rt, MemoryWritten) if e.memory_id == midway.id]
    assert written[0].embedding_model == OLD
    # erased midway, after its new vector was appended: no vector of it is kept anywhere
    erased = next(ref for ref, _ in aside(rt))
    rt.core.erasure.forget(
        ADMIN if erased in _acme(old_ledger) else _globex_admin(), Forget(ids=(erased,), reason="r")
    )
    rt.reads.runner.catch_up()
    assert erased not in {ref for ref, _ in aside(rt)}
    assert erased not in models_of_docs(rt)

    report = rt.reembed.run(OPERATOR, batch=4)
    assert report.adopted
    assert report.serving == NEW
    assert report.missing == 0
    assert report.reembedded == len(FACTS) - 3 + 1  # the rest and the midway one
    assert fresh_serving(rt) == (NEW, 256)
    docs = models_of_docs(rt)
    assert set(docs.values()) == {NEW}
    assert midway.id in docs
    assert {m for _, m in aside(rt)} == {OLD}  # the old vectors wait aside (a switch back is instant)
    assert found(rt, AGENT, "midway cache omega")[0] == "The midway cache lives on host omega"
    assert vector_lane(rt, AGENT, FACTS[5])[0] == old_ledger[FACTS[5]]  # by the new vectors
    with rt.ledger.datastore.get_connection() as conn:
        indexes = {r["indexname"] for r in conn.execute("SELECT indexname FROM pg_indexes").fetchall()}
    assert hnsw_index_name(NEW) in indexes
    assert hnsw_index_name(OLD) not in indexes

    # new writes are embedded by the new model now
    later = rt.memory.write(AGENT, WriteMemory(content="Written after the switch"))
    assert [e.embedding_model for e in events_of(rt, MemoryWritten) if e.memory_id == later.id] == [NEW]

    # a second run appends nothing
    head = rt.ledger.head_position()
    again = rt.reembed.run(OPERATOR)
    assert (again.reembedded, again.adopted, again.missing) == (0, False, 0)
    assert rt.ledger.head_position() == head
    assert len(events_of(rt, EmbeddingModelAdopted)) == 1

    # a replay from zero gives the same index
    report_rebuild = Rebuilder(rt.reads.runner).rebuild("search_index", verify=True)
    assert report_rebuild.differences == []


def test_re_embeddings_are_sealed_and_an_erased_ones_unreadable(
    new_runtime: Runtime, old_ledger: dict[str, UUID]
) -> None:
    rt = new_runtime
    rt.reembed.run(OPERATOR)
    memory_id = old_ledger[FACTS[1]]
    with psycopg.connect(rt.core.params.conninfo()) as conn:
        rows = conn.execute("SELECT state FROM memwarden.events WHERE topic = 'MemoryReembedded'").fetchall()
    assert len(rows) == len(FACTS)
    for (state,) in rows:
        assert bytes(state).startswith(b'{"e":')
        assert b'"embedding":null' in bytes(state)
    rt.core.erasure.forget(ADMIN, Forget(ids=(memory_id,), reason="request"))
    reembedded = [
        e for e in rt.ledger.streams([memory_id])[memory_id] if isinstance(e.event, MemoryReembedded)
    ]
    assert len(reembedded) == 1
    assert reembedded[0].event.embedding is None
    rt.reads.runner.catch_up()
    assert memory_id not in models_of_docs(rt)
    assert memory_id not in {ref for ref, _ in aside(rt)}
    assert Rebuilder(rt.reads.runner).rebuild("search_index", verify=True).differences == []


def _acme(ids: dict[str, UUID]) -> set[UUID]:
    return {ids[f] for n, f in enumerate(FACTS) if n % 2}


def _globex_admin() -> Identity:
    return Identity("globex/ops", "gus", "admin")


def test_the_cli_runs_the_pass_to_completion_and_reports_it(
    settings: Settings,
    old_ledger: dict[str, UUID],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash-256")
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    assert main(["reembed", "--batch", "4", "--json"]) == 0
    out = msgspec.json.decode(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["report"]["reembedded"] == len(FACTS)
    assert out["report"]["adopted"] is True
    assert out["report"]["serving"] == NEW
    assert main(["reembed"]) == 0
    assert "0 memories re-embedded" in capsys.readouterr().out
