"""Adaptive reranking and the read path's reuse, on real PostgreSQL.

- The hybrid driver with ``LanesDisagree`` reranks where its lanes disagree, with the very
  answer of the driver that always reranks, and skips where they agree, with the very
  answer of the driver that never does (real MiniLM lanes, real ms-marco cross-encoder).
- What a search reuses (the rows its view read once, the query's cached embedding) never
  outlives the search's snapshot: a supersedence or an erasure shows at the next search.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import CachingEmbedder
from memwarden.domain.embedding.rerank import CrossEncoder, shared_cross_encoder
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.drivers import (
    HybridDriver,
    LanesDisagree,
    SearchRequest,
    candidates_for,
)
from memwarden.projections.search.service import SearchQuery
from memwarden.projections.search.stages import recording
from memwarden.projections.search.view import Hit

ALPHA = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
ADMIN = Identity(namespace="acme", actor="root", role="admin")
ANSWER = "Dana moved to Lisbon last spring."
MEMORIES = (
    ANSWER,
    "Did Dana like the city? Dana did not say.",
    "The city council will move the Dana bus stop.",
    "Dana cleaned the city car before the move of the printer.",
    "The quarterly report is due on Friday.",
    "Espresso machines need descaling every month.",
)
DISAGREEING = "Which city did Dana move to?"  # its words point at the distractors
AGREEING = "Dana moved to Lisbon last spring"  # words and meaning both point at the answer


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def write(rt: Runtime, content: str, **kw: str) -> uuid.UUID:
    result = rt.memory.write(ALPHA, WriteMemory(content=content, **kw))
    assert result.id is not None, result
    return result.id


def run(rt: Runtime, driver: HybridDriver, query: str, k: int) -> tuple[list[Hit], bool, bool]:
    """The driver's hits, whether it reranked, and whether the lanes disagreed, in one view."""
    search = rt.reads.search
    q = SearchQuery(query=query, k=k)
    with search.view(ALPHA, q, search.embed_later(query)) as (view, *_), recording() as stages:
        n = candidates_for(k)
        disagree = LanesDisagree()(view.lexical_lane(n), view.vector_lane(n), k)
        hits = driver.search(view, SearchRequest(query=query, k=k))
    return hits, "rerank" in stages, disagree


@pytest.mark.minilm
@pytest.mark.models
@pytest.mark.parametrize(("query", "k"), [(DISAGREEING, 2), (AGREEING, 2)])
def test_adaptive_reranking_is_the_full_reranker_where_lanes_disagree_and_none_where_they_agree(
    runtime: Runtime, query: str, k: int
) -> None:
    for content in MEMORIES:
        write(runtime, content)
    runtime.reads.wait_for(runtime.ledger.head_position())
    reranker: CrossEncoder = shared_cross_encoder()
    adaptive, reranked_adaptively, disagree = run(
        runtime, HybridDriver(reranker=reranker, rerank_when=LanesDisagree()), query, k
    )
    always, reranked_always, _ = run(runtime, HybridDriver(reranker=reranker), query, k)
    never, reranked_never, _ = run(runtime, HybridDriver(), query, k)
    assert disagree is (query == DISAGREEING)  # the premise: these lanes do (not) disagree
    assert reranked_always
    assert not reranked_never
    assert reranked_adaptively is disagree
    assert adaptive == (always if disagree else never)


def test_lanes_disagree_by_the_share_of_their_best_k_they_share() -> None:
    a, b, c, d = (Hit(uuid.UUID(int=n), 1.0 / n) for n in range(1, 5))
    gate = LanesDisagree(agreement=0.5)
    assert not gate([a, b, c, d], [b, a, d, c], 2)  # the same best two
    assert not gate([a, b], [a, c], 2)  # one of two shared: half agrees
    assert gate([a, b], [c, d], 2)  # nothing shared
    assert gate([a, b, c], [d, c, b], 2)  # shared, but not among the best two
    assert gate([], [a, b], 2)  # a lane that found nothing cannot agree
    assert gate([a], [], 2)
    assert not LanesDisagree(agreement=0.0)([a], [b], 1)  # agreement 0: never rerank
    with pytest.raises(ValueError, match="between 0 and 1"):
        LanesDisagree(agreement=1.5)


@pytest.mark.minilm  # the configured MiniLM comes with the query embedding cache
def test_a_supersedence_or_an_erasure_shows_at_the_next_search_whatever_it_reused(
    runtime: Runtime,
) -> None:
    def found(query: str) -> list[str | None]:
        answer = runtime.reads.search.search(
            ALPHA, SearchQuery(query=query, k=5), after=runtime.ledger.head_position()
        )
        return [r.content for r in answer.results]

    query = "Where does Dana live?"
    embedder = runtime.reads.search.embedder
    assert isinstance(embedder, CachingEmbedder)
    cached = len(embedder)
    write(runtime, "Dana lives in Oslo.", subject="dana", attribute="home", value="Oslo")
    assert len(embedder) == cached  # a memory's own text is embedded past the query cache
    assert found(query) == ["Dana lives in Oslo."]
    newer = write(runtime, "Dana lives in Lisbon.", subject="dana", attribute="home", value="Lisbon")
    assert found(query) == ["Dana lives in Lisbon."]  # the corrected one is gone at once
    runtime.core.erasure.forget(ADMIN, Forget(ids=(newer,), reason="request"))
    assert found(query) == []
    assert embedder.hits >= 2  # the same query's embedding was reused: only the vector is cached
