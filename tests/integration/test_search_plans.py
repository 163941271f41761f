"""The plans of the search lanes: a lane's few candidates are checked against
``memory_objects`` one by one through its primary key, never by reading the whole table
(a hash join over a sequential scan cost a 5k-memory scope 4-6 ms of every search)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.sql import Composed

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.service import SearchQuery
from memwarden.projections.search.view import ScopedView

AGENT = Identity(namespace="acme/eng/plans", actor="bot", role="agent")
MEMORIES = 400


@pytest.fixture
def runtime(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    with Runtime(settings) as rt:
        for n in range(MEMORIES):
            rt.memory.write(
                AGENT, WriteMemory(content=f"note {n}: the build {n % 7} failed on runner {n % 13}")
            )
        rt.reads.wait_for(rt.ledger.head_position())
        with rt.ledger.datastore.get_connection() as conn:
            conn.execute(f"ANALYZE {rt.ledger.schema}.memory_objects")
            conn.execute(f"ANALYZE {rt.ledger.schema}.search_docs")
            conn.execute(f"ANALYZE {rt.ledger.schema}.search_postings")
        yield rt


def plans(rt: Runtime, lane: str) -> list[str]:
    """The plans (EXPLAIN, same SQL and parameters) of what ``lane`` sends."""
    search = rt.reads.search
    q = SearchQuery(query="which build failed on the runner", k=10)
    seen: list[str] = []
    with search.view(AGENT, q, search.embed_later(q.query)) as (view, conn, *_):
        fetch = view._fetch

        def explained(query: Composed, params: dict[str, Any]) -> list[dict[str, Any]]:
            plan = conn.execute(b"EXPLAIN " + query.as_bytes(conn), view._params | params).fetchall()
            seen.append("\n".join(r["QUERY PLAN"] for r in plan))
            return fetch(query, params)

        view._fetch = explained  # type: ignore[method-assign]
        hits = getattr(ScopedView, lane)(view, 40)
    assert len(hits) == 40
    return seen


@pytest.mark.parametrize("lane", ["vector_lane", "lexical_lane"])
def test_a_lanes_candidates_are_checked_by_key_not_by_scanning_memory_objects(
    runtime: Runtime, lane: str
) -> None:
    checked = [p for p in plans(runtime, lane) if "memory_objects" in p]
    assert checked, "the lane checks its candidates against memory_objects"
    for plan in checked:
        assert "Seq Scan on memory_objects" not in plan, plan
        assert "memory_objects_pkey" in plan, plan
