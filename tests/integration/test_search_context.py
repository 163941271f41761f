"""Write-order neighbours in the hybrid driver: a reply that shares no word with the query is
found through the memory written just before it, and a neighbour is only ever one the
caller's view lets through (its scope, current memories)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.drivers import HybridDriver, SearchRequest
from memwarden.projections.search.service import SearchQuery
from memwarden.projections.search.view import Hit
from tests.integration.writing import write

ALPHA = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
CHILD = Identity(namespace="acme/eng/alpha/sub", actor="bot", role="agent")
BETA = Identity(namespace="acme/eng/beta", actor="bot", role="agent")
ADMIN = Identity(namespace="acme", actor="root", role="admin")
FILLER = (
    "The deploy freeze starts on Friday.",
    "Lunch order for the offsite is tacos.",
    "The staging database was resized last night.",
    "Pager rotation swaps every Monday morning.",
)


@pytest.fixture
def runtime(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")  # word overlap is the point, not meaning
    with Runtime(settings) as rt:
        yield rt


def ranked(rt: Runtime, who: Identity, query: str, driver: HybridDriver) -> list[Hit]:
    rt.reads.wait_for(rt.ledger.head_position())
    search = rt.reads.search
    q = SearchQuery(query=query, k=10)
    with search.view(who, q, search.embed_later(q.query)) as (view, *_):
        return driver.search(view, SearchRequest(query=query, k=10))


def neighbours(
    rt: Runtime, who: Identity, refs: list[uuid.UUID], span: int = 2
) -> set[tuple[uuid.UUID, uuid.UUID, int]]:
    rt.reads.wait_for(rt.ledger.head_position())
    search = rt.reads.search
    q = SearchQuery(query="anything", k=10)
    with search.view(who, q, search.embed_later(q.query)) as (view, *_):
        return set(view.neighbours(refs, span))


def test_the_reply_after_a_matching_memory_is_found_through_it(runtime: Runtime) -> None:
    asked = write(runtime, ALPHA, "Sam: which novel did Jo recommend to you?")
    reply = write(runtime, ALPHA, "Kim: Becoming Nicole - it taught me patience.")
    for text in FILLER:  # written after: the reply is the only memory one place from the match
        write(runtime, ALPHA, text)
    query = "novel Jo recommended"
    lexical_only = HybridDriver(vector_weight=0.0, context_weight=0.0)
    plain = {h.ref: h.score for h in ranked(runtime, ALPHA, query, lexical_only)}
    assert plain[asked] == 1.0
    assert plain.get(reply, 0.0) == 0.0  # no word in common: the lanes alone cannot rank it
    with_context = ranked(runtime, ALPHA, query, HybridDriver(vector_weight=0.0))
    assert [h.ref for h in with_context[:2]] == [asked, reply]
    assert with_context[1].score == pytest.approx(0.5)


def test_neighbours_are_the_nearest_in_the_namespace_write_order(runtime: Runtime) -> None:
    first = write(runtime, ALPHA, FILLER[0])
    write(runtime, CHILD, FILLER[1])  # another namespace: not in between
    second = write(runtime, ALPHA, FILLER[2])
    third = write(runtime, ALPHA, FILLER[3])
    fourth = write(runtime, ALPHA, "The retro moved to the big room.")
    assert neighbours(runtime, ALPHA, [second], span=1) == {(second, first, 1), (second, third, 1)}
    assert neighbours(runtime, ALPHA, [first]) == {(first, second, 1), (first, third, 2)}
    assert neighbours(runtime, ALPHA, [fourth], span=0) == set()


def test_a_neighbour_outside_the_view_is_never_lent_to(runtime: Runtime) -> None:
    """A shared memory's neighbours stay in their own namespace, outside the caller's scope;
    a retired neighbour is skipped however close it is."""
    write(runtime, BETA, FILLER[0])
    shared = write(runtime, BETA, "Kestrel nesting site is heliotrope ridge.")
    write(runtime, BETA, FILLER[1])
    runtime.core.governance.share(ADMIN, runtime.memory.memory(shared), ALPHA.namespace)
    assert neighbours(runtime, ALPHA, [shared]) == set()

    write(runtime, ALPHA, "Dana lives in Oslo.", subject="dana", attribute="home", value="Oslo")
    hit = write(runtime, ALPHA, "Kestrel chicks hatched this week.")
    lisbon = write(runtime, ALPHA, "Dana lives in Lisbon.", subject="dana", attribute="home", value="Lisbon")
    assert neighbours(runtime, ALPHA, [hit]) == {(hit, lisbon, 1)}  # Oslo, before it, is retired

    found = {h.ref for h in ranked(runtime, ALPHA, "kestrel", HybridDriver())}
    assert found == {shared, hit, lisbon}


def test_the_lanes_read_the_neighbours_their_own_statement_would_and_none_twice(runtime: Runtime) -> None:
    """The hybrid driver's lanes read their hits' neighbours in their own statements (the
    second lane only those the first did not): the same neighbours a statement of their
    own finds, the view's scope and read filter included, and ``neighbours`` then reads
    nothing more."""
    write(runtime, BETA, FILLER[0])
    shared = write(runtime, BETA, "Kestrel nesting site is heliotrope ridge.")
    write(runtime, BETA, FILLER[1])
    runtime.core.governance.share(ADMIN, runtime.memory.memory(shared), ALPHA.namespace)
    write(runtime, ALPHA, "Dana lives in Oslo.", subject="dana", attribute="home", value="Oslo")
    write(runtime, ALPHA, "Kestrel chicks hatched this week.")
    write(runtime, ALPHA, "Dana lives in Lisbon.", subject="dana", attribute="home", value="Lisbon")
    write(runtime, CHILD, "Kestrel pellets were found under the kestrel box.")
    for text in FILLER:
        write(runtime, ALPHA, text)
    write(runtime, ALPHA, "A kestrel hovered over the car park.")
    write(runtime, ALPHA, FILLER[0])
    runtime.reads.wait_for(runtime.ledger.head_position())
    search = runtime.reads.search
    q = SearchQuery(query="kestrel staging", k=10)
    for span in (1, 2):
        with search.view(ALPHA, q, search.embed_later(q.query)) as (view, *_):
            lexical = view.lexical_lane(40, span)
            vector = view.vector_lane(40, span)
            refs = list(dict.fromkeys(h.ref for h in [*lexical, *vector]))
            statements: list[object] = []
            fetch = view._fetch

            def counted(
                query: Any, params: dict[str, Any], fetch: Any = fetch, statements: list[object] = statements
            ) -> list[dict[str, Any]]:
                statements.append(query)
                rows: list[dict[str, Any]] = fetch(query, params)
                return rows

            view._fetch = counted  # type: ignore[method-assign]
            from_lanes = set(view.neighbours(refs, span))
        assert statements == []
        assert len(refs) > 4
        assert from_lanes == neighbours(runtime, ALPHA, refs, span)
        assert from_lanes
