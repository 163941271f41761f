"""The hybrid driver's reranking stage with the real ms-marco cross-encoder: it reorders the
driver's best ``rerank_depth`` by relevance and leaves the rest in place."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding.rerank import CrossEncoder, shared_cross_encoder
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.drivers import HybridDriver, SearchRequest
from memwarden.projections.search.service import SearchQuery
from memwarden.projections.search.view import Hit

pytestmark = pytest.mark.models

ALPHA = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
QUERY = "Which city did Dana move to?"
ANSWER = "Dana moved to Lisbon last spring."
DISTRACTORS = (  # more of the query's words than the answer, none of its meaning
    "Did Dana like the city? Dana did not say.",
    "The city council will move the Dana bus stop.",
    "Dana cleaned the city car before the move of the printer.",
)


@pytest.fixture(scope="module")
def cross_encoder() -> CrossEncoder:
    return shared_cross_encoder()


@pytest.fixture
def runtime(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")  # the lanes rank by words; the reranker by meaning
    with Runtime(settings) as rt:
        yield rt


def write(rt: Runtime, who: Identity, content: str) -> uuid.UUID:
    result = rt.memory.write(who, WriteMemory(content=content))
    assert result.id is not None, result
    return result.id


def ranked(rt: Runtime, driver: HybridDriver, k: int = 10) -> list[Hit]:
    rt.reads.wait_for(rt.ledger.head_position())
    search = rt.reads.search
    q = SearchQuery(query=QUERY, k=k)
    with search.view(ALPHA, q, search.embed_later(q.query)) as (view, *_):
        return driver.search(view, SearchRequest(query=QUERY, k=k))


def test_the_cross_encoder_scores_the_answer_above_passages_that_share_its_words(
    cross_encoder: CrossEncoder,
) -> None:
    scores = cross_encoder.score(QUERY, [ANSWER, *DISTRACTORS])
    assert scores.shape == (4,)
    assert scores[0] > max(scores[1:]) + 1.0
    assert cross_encoder.score(QUERY, []).shape == (0,)


def test_reranking_lifts_the_answer_from_below_the_distractors(
    runtime: Runtime, cross_encoder: CrossEncoder
) -> None:
    distractors = [write(runtime, ALPHA, text) for text in DISTRACTORS]
    answer = write(runtime, ALPHA, ANSWER)
    plain = HybridDriver(context_weight=0.0)
    before = [h.ref for h in ranked(runtime, plain)]
    assert before.index(answer) > 0  # fewer of the query's words: below a distractor
    # The cross-encoder's share made large: its order decides (the shipped weight, 1.0, only
    # breaks what the lanes leave close, since its sigmoid saturates on relevant text).
    reranking = HybridDriver(context_weight=0.0, reranker=cross_encoder, rerank_weight=1000.0)
    after = ranked(runtime, reranking)
    assert after[0].ref == answer
    assert {h.ref for h in after} == set(before) == {answer, *distractors}
    shipped = ranked(runtime, HybridDriver(context_weight=0.0, reranker=cross_encoder))
    assert {h.ref for h in shipped} == set(before)


def test_only_the_top_of_the_ranking_is_reordered(runtime: Runtime, cross_encoder: CrossEncoder) -> None:
    for text in DISTRACTORS:
        write(runtime, ALPHA, text)
    write(runtime, ALPHA, ANSWER)
    before = [h.ref for h in ranked(runtime, HybridDriver(context_weight=0.0))]
    after = ranked(
        runtime,
        HybridDriver(context_weight=0.0, reranker=cross_encoder, rerank_depth=2, rerank_weight=1000.0),
    )
    assert {h.ref for h in after[:2]} == set(before[:2])
    assert [h.ref for h in after[2:]] == before[2:]
    assert min(h.score for h in after[:2]) > max(h.score for h in after[2:])


def test_a_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="rerank_depth"):
        HybridDriver(rerank_depth=0)
