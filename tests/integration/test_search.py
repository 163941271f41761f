"""Search on real PostgreSQL + pgvector: scope in every lane and driver, degradation, filters,
erasure and rebuild of the index. Retrieval by meaning (marked ``minilm``) with the real
offline embedder; the rest with the hash embedder, the suite's default."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import EmbedderUnavailable
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.search import view as view_module
from memwarden.projections.search.drivers import HybridDriver, LexicalDriver, SearchRequest, VectorDriver
from memwarden.projections.search.service import SearchQuery
from tests.integration.writing import write

ALPHA = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
ENG = Identity(namespace="acme/eng", actor="lead", role="member")
BETA = Identity(namespace="acme/eng/beta", actor="bot", role="agent")
CHILD = Identity(namespace="acme/eng/alpha/sub", actor="bot", role="agent")
LOOKALIKE = Identity(namespace="acme/engineering", actor="bot", role="agent")
OTHER = Identity(namespace="globex/eng/alpha", actor="bot", role="agent")
ADMIN = Identity(namespace="acme", actor="root", role="admin")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def search(rt: Runtime, who: Identity, query: str, driver: str | None = None, **kw: Any) -> list[uuid.UUID]:
    answer = rt.reads.search.search(
        who, SearchQuery(query=query, **kw), driver, after=rt.ledger.head_position()
    )
    return [r.id for r in answer.results]


@pytest.mark.minilm
def test_the_hybrid_driver_finds_by_meaning_and_by_words(runtime: Runtime) -> None:
    lisbon = write(runtime, ALPHA, "Dana moved to Lisbon in May.")
    write(runtime, ALPHA, "The build server runs Debian 12 on two cores.")
    write(runtime, ALPHA, "Standups happen at 9:30 in the small meeting room.")
    assert search(runtime, ALPHA, "where does Dana live now?", k=1) == [lisbon]  # meaning, few shared words
    answer = runtime.reads.search.search(ALPHA, SearchQuery(query="debian build"))
    assert answer.driver == "hybrid"
    assert not answer.degraded
    assert "Debian" in (answer.results[0].content or "")
    assert answer.results[0].score >= answer.results[-1].score


def test_embeddings_are_sealed_in_the_event_not_recomputed(runtime: Runtime) -> None:
    memory_id = write(runtime, ALPHA, "Quarterly planning happens in the first week of March.")
    events = runtime.ledger.streams([memory_id])[memory_id]
    written = events[0].event
    assert written.embedding is not None  # type: ignore[attr-defined]
    assert written.embedding_model == runtime.core.embedder.model_id  # type: ignore[attr-defined,union-attr]
    vector = np.frombuffer(written.embedding, dtype="<f2")  # type: ignore[attr-defined]
    assert vector.shape == (384,)
    assert abs(float(np.linalg.norm(vector.astype(np.float32))) - 1.0) < 0.01
    with runtime.ledger.datastore.get_connection() as conn:
        raw = conn.execute(
            SQL("SELECT state FROM {}.events WHERE originator_id = %s AND originator_version = 1").format(
                Identifier(runtime.ledger.schema)
            ),
            (memory_id,),
        ).fetchone()
    assert raw is not None
    stored = bytes(raw["state"])
    assert b'"embedding":null' in stored  # the clear form holds no vector: it is sealed
    assert base64.b64encode(written.embedding) not in stored  # type: ignore[attr-defined]


def plant(rt: Runtime) -> dict[str, uuid.UUID]:
    """The same distinctive fact in every namespace around the caller's."""
    text = "The kestrel nesting site is heliotrope ridge for team {}."
    ids = {
        name: write(rt, who, text.format(name))
        for name, who in {
            "alpha": ALPHA,
            "eng": ENG,
            "beta": BETA,
            "child": CHILD,
            "lookalike": LOOKALIKE,
            "other": OTHER,
        }.items()
    }
    rt.reads.wait_for(rt.ledger.head_position())
    return ids


@pytest.mark.parametrize("driver", ["hybrid", "lexical", "baseline", None])
def test_every_driver_sees_own_namespace_and_ancestors_only(runtime: Runtime, driver: str | None) -> None:
    ids = plant(runtime)
    found = set(search(runtime, ALPHA, "kestrel nesting site heliotrope ridge", driver, k=20))
    assert found == {ids["alpha"], ids["eng"]}


@pytest.mark.minilm
def test_the_hnsw_plan_finds_the_same_neighbours_as_the_exact_scan(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(30):
        write(
            runtime, ALPHA if n % 2 else ENG, f"Survey {n}: the kestrel count on ridge {n % 7} was {n * 3}."
        )
    plant(runtime)
    results = {}
    for limit in (5_000, 0):
        monkeypatch.setattr(view_module, "EXACT_SCAN_MAX", limit)
        results[limit] = search(runtime, ALPHA, "how many kestrels were counted on the ridge", "hybrid", k=10)
    assert len(results[0]) == 10
    assert results[0] == results[5_000]


@pytest.mark.parametrize("exact_scan_max", [5_000, 0], ids=["exact-scan", "hnsw"])
def test_every_lane_respects_the_scope(
    runtime: Runtime, exact_scan_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both vector plans: the exact scan of a small scope, and the HNSW walk of a large one."""
    monkeypatch.setattr(view_module, "EXACT_SCAN_MAX", exact_scan_max)
    ids = plant(runtime)
    allowed = {ids["alpha"], ids["eng"]}
    search = runtime.reads.search
    q = SearchQuery(query="kestrel nesting site heliotrope ridge", k=20)
    with search.view(ALPHA, q, search.embed_later(q.query)) as (view, *_):
        assert {h.ref for h in view.vector_lane(50)} <= allowed
        assert {h.ref for h in view.lexical_lane(50)} == allowed
        assert set(view.scores(list(ids.values()))) == allowed
        for driver in (HybridDriver(), LexicalDriver(), VectorDriver()):
            assert {h.ref for h in driver.search(view, SearchRequest(query=q.query, k=20))} <= allowed


def test_a_share_makes_exactly_that_memory_searchable(runtime: Runtime) -> None:
    ids = plant(runtime)
    beta_state = runtime.memory.memory(ids["beta"])
    runtime.core.governance.share(ADMIN, beta_state, ALPHA.namespace)
    runtime.reads.wait_for(runtime.ledger.head_position())
    found = set(search(runtime, ALPHA, "kestrel nesting site heliotrope ridge", k=20))
    assert found == {ids["alpha"], ids["eng"], ids["beta"]}


@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "acme",
                    "acme/eng",
                    "acme/eng/alpha",
                    "acme/eng/alpha/sub",
                    "acme/eng/beta",
                    "acme/engx",
                    "globex",
                ]
            ),
            st.sampled_from(["falcon", "kestrel", "osprey"]),
        ),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from(["acme/eng/alpha", "acme/eng", "acme/engx", "globex", "acme/eng/alpha/sub"]),
    st.sampled_from(["hybrid", "lexical"]),
)
def test_property_search_never_leaks_outside_the_scope(
    runtime: Runtime, memories: list[tuple[str, str]], caller_ns: str, driver: str
) -> None:
    run = uuid.uuid4().hex[:6]
    placed: dict[uuid.UUID, str] = {}
    birds: dict[uuid.UUID, str] = {}
    for n, (namespace, bird) in enumerate(memories):
        who = Identity(namespace=f"{run}{namespace}", actor="w", role="agent")
        ref = write(runtime, who, f"The {bird} nest count for survey {n} is {n * 7}.")
        placed[ref], birds[ref] = f"{run}{namespace}", bird
    caller = Identity(namespace=f"{run}{caller_ns}", actor="r", role="agent")
    scope = {
        caller.namespace,
        *(caller.namespace.rsplit("/", i)[0] for i in range(1, caller.namespace.count("/") + 1)),
    }
    visible = {ref for ref, namespace in placed.items() if namespace in scope}
    for query in ("falcon nest count", "kestrel survey", "osprey"):
        found = search(runtime, caller, query, driver, k=50)
        assert all(placed[f] in scope for f in found if f in placed)
        assert not set(found) - set(placed)  # nothing from other examples' namespaces either
        # and not by finding nothing: every visible memory sharing a word with the query is found
        matching = visible if query != "osprey" else {ref for ref in visible if birds[ref] == "osprey"}
        assert matching <= set(found), (query, matching - set(found))


def test_retired_and_quarantined_memories_are_not_current(runtime: Runtime) -> None:
    old = write(runtime, ALPHA, "Dana lives in Oslo.", subject="dana", attribute="home", value="Oslo")
    new = write(runtime, ALPHA, "Dana lives in Lisbon.", subject="dana", attribute="home", value="Lisbon")
    manual = WriteMemory(content="Dana lives in Porto.", subject="dana", attribute="home", value="Porto")
    hr = Identity(namespace="acme/eng/alpha", actor="hr", role="member")
    porto = runtime.memory.write(hr, msgspec_replace(manual, source="manual"))
    disputed = runtime.memory.write(
        ALPHA, WriteMemory(content="Dana lives in Rome.", subject="dana", attribute="home", value="Rome")
    )
    assert disputed.outcome == "disputed"
    current = set(search(runtime, ALPHA, "where does Dana live", k=20))
    assert current == {porto.id}
    with_retired = set(search(runtime, ALPHA, "where does Dana live", k=20, include_retired=True))
    assert {old, new, porto.id} <= with_retired
    assert disputed.id not in with_retired


def msgspec_replace(command: WriteMemory, source: str) -> WriteMemory:
    return msgspec.structs.replace(command, provenance=ProvenanceClaim(source=source))


def test_as_of_search_sees_what_was_believed_then(runtime: Runtime) -> None:
    before = datetime.now(UTC)
    old = write(
        runtime,
        ALPHA,
        "The release train leaves on Thursdays.",
        subject="release",
        attribute="day",
        value="thu",
    )
    between = datetime.now(UTC)
    new = write(
        runtime,
        ALPHA,
        "The release train leaves on Fridays.",
        subject="release",
        attribute="day",
        value="fri",
    )
    assert set(search(runtime, ALPHA, "when does the release train leave", k=5)) == {new}
    assert set(search(runtime, ALPHA, "when does the release train leave", k=5, as_of=between)) == {old}
    assert (
        search(runtime, ALPHA, "when does the release train leave", k=5, as_of=before - timedelta(seconds=1))
        == []
    )


def test_tags_and_selectors_filter(runtime: Runtime) -> None:
    tagged = write(
        runtime,
        ALPHA,
        "Invoices go out on the first Monday.",
        tags=("finance",),
        selectors=("channel:slack",),
    )
    write(runtime, ALPHA, "Invoices for the lab go out on Fridays.")
    assert search(runtime, ALPHA, "when do invoices go out", tags=("finance",)) == [tagged]
    assert search(runtime, ALPHA, "when do invoices go out", selectors=("channel:slack",)) == [tagged]
    assert search(runtime, ALPHA, "when do invoices go out", tags=("finance", "hr")) == []


def test_token_budget_keeps_the_top_hit_and_fits_the_rest(runtime: Runtime) -> None:
    long = "The on-call rotation " + "covers weekends and public holidays for every team " * 8
    write(runtime, ALPHA, long)
    for n in range(5):
        write(runtime, ALPHA, f"On-call note {n}: rotation swaps need a day's notice.")
    after = runtime.ledger.head_position()  # read-your-writes: the projector may lag on busy cores
    answer = runtime.reads.search.search(
        ALPHA, SearchQuery(query="on-call rotation", k=10, token_budget=30), after=after
    )
    tokens = [max(1, -(-len(r.content or "") // 4)) for r in answer.results]
    assert answer.results
    assert len(answer.results) == 1 or sum(tokens) <= 30
    only_top = runtime.reads.search.search(ALPHA, SearchQuery(query="on-call rotation", k=10, token_budget=1))
    assert len(only_top.results) == 1


class Broken:
    """An embedder whose service is down (of the model the index serves: the tests' hashing one)."""

    model_id = "feature-hash-v1-384"
    dimensions = 384

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        raise EmbedderUnavailable("connection refused")


def test_search_degrades_to_lexical_when_the_embedder_fails(runtime: Runtime) -> None:
    memory_id = write(runtime, ALPHA, "The coffee machine on floor 3 is broken.")
    real = runtime.reads.search.embedder
    runtime.reads.search.embedder = Broken()  # type: ignore[assignment]
    try:
        answer = runtime.reads.search.search(
            ALPHA, SearchQuery(query="coffee machine floor"), after=runtime.ledger.head_position()
        )
    finally:
        runtime.reads.search.embedder = real
    assert answer.degraded
    assert answer.driver == "lexical-degraded"
    assert [r.id for r in answer.results] == [memory_id]


def test_a_write_survives_a_failing_embedder_and_says_so(runtime: Runtime) -> None:
    runtime.memory.embedder = Broken()  # type: ignore[assignment]
    result = runtime.memory.write(ALPHA, WriteMemory(content="Parking passes renew in January."))
    assert result.outcome == "stored"
    assert result.id is not None
    written = runtime.ledger.streams([result.id])[result.id][0].event
    assert written.embedding is None  # type: ignore[attr-defined]
    audit = runtime.ledger.read(result.position - 1, 5)
    assert any("embedding unavailable" in getattr(r.event, "detail", "") for r in audit)
    assert search(runtime, ALPHA, "parking passes renew") == [result.id]  # the lexical lane still finds it


def test_a_failing_policy_driver_falls_back_to_the_baseline(runtime: Runtime) -> None:
    class Exploding:
        name = "exploding"

        def search(self, view: Any, request: SearchRequest) -> list[Any]:
            raise RuntimeError("bug in a driver")

    memory_id = write(runtime, ALPHA, "Backups run nightly at 02:00.")
    runtime.reads.search.drivers["exploding"] = Exploding()  # type: ignore[assignment]
    answer = runtime.reads.search.search(
        ALPHA, SearchQuery(query="when do backups run"), "exploding", runtime.ledger.head_position()
    )
    assert answer.driver == "hybrid (fallback from exploding)"
    assert [r.id for r in answer.results][:1] == [memory_id]


def test_bad_queries_are_refused(runtime: Runtime) -> None:
    from memwarden.domain.model.errors import InvalidRequest  # noqa: PLC0415

    for bad in (
        SearchQuery(query="  "),
        SearchQuery(query="x", k=0),
        SearchQuery(query="x", k=1000),
        SearchQuery(query="x", token_budget=0),
        SearchQuery(query="x" * 5000),
        SearchQuery(query="x", as_of=datetime(2026, 1, 1)),
    ):
        with pytest.raises(InvalidRequest):
            runtime.reads.search.search(ALPHA, bad)


def test_erasure_removes_every_index_row_and_statistic(runtime: Runtime) -> None:
    marker = f"zq{uuid.uuid4().hex[:10]}"
    memory_id = write(runtime, ALPHA, f"The locker code is {marker} until June.")
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert search(runtime, ALPHA, marker) == [memory_id]
    runtime.core.erasure.forget(ADMIN, Forget(ids=(memory_id,), reason="request"))
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert search(runtime, ALPHA, marker) == []
    s = Identifier(runtime.ledger.schema)
    with runtime.ledger.datastore.get_connection() as conn:
        for table, column in (("search_docs", "ref"), ("search_postings", "ref")):
            row = conn.execute(
                SQL("SELECT count(*) AS n FROM {}.{} WHERE {} = %s").format(
                    s, Identifier(table), Identifier(column)
                ),
                (memory_id,),
            ).fetchone()
            assert row is not None
            assert row["n"] == 0
        assert (
            conn.execute(
                SQL("SELECT count(*) AS n FROM {}.search_terms WHERE term = %s").format(s), (marker,)
            ).fetchone()["n"]
            == 0
        )  # type: ignore[index]
        stats = conn.execute(
            SQL("SELECT docs FROM {}.search_stats WHERE namespace = %s AND kind = 'memory'").format(s),
            (ALPHA.namespace,),
        ).fetchone()
        assert stats is None  # as if it had never been indexed


def test_rebuilding_the_search_index_gives_the_same_rows(runtime: Runtime) -> None:
    ids = plant(runtime)
    runtime.core.erasure.forget(ADMIN, Forget(ids=(ids["beta"],), reason="request"))
    write(runtime, ALPHA, "Lunch is served at noon on weekdays.")
    runtime.reads.wait_for(runtime.ledger.head_position())
    report = Rebuilder(runtime.reads.runner).rebuild("search_index", verify=True)
    assert report.differences == []
    assert set(search(runtime, ALPHA, "kestrel nesting site", "lexical", k=20)) == {ids["alpha"], ids["eng"]}
    assert set(search(runtime, ALPHA, "kestrel nesting site", k=2)) == {ids["alpha"], ids["eng"]}
