"""The lanes' SQL at scale, checked against plain definitions on small fixtures: the
lexical lane's scores are Okapi BM25 over the caller's scope, computed here from the same
terms; whatever plan a lane takes, a memory the read filter hides never comes back."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator

import msgspec
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search import view as view_module
from memwarden.projections.search.lexical import K1, B, query_terms, term_frequencies
from memwarden.projections.search.service import SearchQuery
from tests.integration.writing import write

ALPHA = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
ENG = Identity(namespace="acme/eng", actor="lead", role="member")
BETA = Identity(namespace="acme/eng/beta", actor="bot", role="agent")
QUERY = "which build failed on the runner after the release"


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def corpus(rt: Runtime) -> dict[uuid.UUID, tuple[Identity, str]]:
    """Notes of uneven lengths and term counts in the caller's scope and beside it."""
    written: dict[uuid.UUID, tuple[Identity, str]] = {}
    for n in range(60):
        who = (ALPHA, ENG, BETA)[n % 3]
        text = f"note {n}: the build {n % 7} failed on runner {n % 5}" + " after the release" * (n % 4)
        if n % 6 == 0:
            text += f", and build {n} failed again on the same runner"
        written[write(rt, who, text)] = (who, text)
    rt.reads.wait_for(rt.ledger.head_position())
    return written


def bm25(docs: dict[uuid.UUID, str], query: str) -> dict[uuid.UUID, float]:
    """Okapi BM25 of ``docs`` (the caller's scope) for ``query``, by its definition."""
    frequencies = {ref: term_frequencies(text) for ref, text in docs.items()}
    avgdl = max(sum(length for _, length in frequencies.values()) / len(docs), 1.0)
    scores: dict[uuid.UUID, float] = {}
    for term in query_terms(query):
        df = sum(1 for tf, _ in frequencies.values() if term in tf)
        idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
        for ref, (tf, length) in frequencies.items():
            if term in tf:
                f = tf[term]
                scores[ref] = scores.get(ref, 0.0) + idf * f * (K1 + 1) / (
                    f + K1 * (1 - B + B * length / avgdl)
                )
    return scores


def test_the_lexical_lane_scores_are_bm25_over_the_callers_scope(runtime: Runtime) -> None:
    written = corpus(runtime)
    visible = {ref: text for ref, (who, text) in written.items() if who in (ALPHA, ENG)}
    expected = bm25(visible, QUERY)
    search = runtime.reads.search
    with search.view(ALPHA, SearchQuery(query=QUERY, k=10), None) as (view, *_):
        hits = view.lexical_lane(len(written))
    assert {h.ref for h in hits} == set(expected)
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.ref], rel=1e-9)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


@pytest.mark.parametrize("exact_scan_max", [5_000, 0], ids=["exact-scan", "hnsw"])
def test_a_retired_or_out_of_scope_memory_never_comes_back_from_a_lane(
    runtime: Runtime, exact_scan_max: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Most of the best candidates hidden (retired, or beside the scope): the lanes fetch
    deeper and still hand back only what the caller may see, the same by either plan."""
    monkeypatch.setattr(view_module, "EXACT_SCAN_MAX", exact_scan_max)
    written = corpus(runtime)
    retired = [
        write(
            runtime,
            ALPHA,
            f"build {n} failed on the runner after the release",
            subject=f"build-{n}",
            attribute="state",
            value="failed",
        )
        for n in range(30)
    ]
    for n in range(30):  # the same subject and attribute: each supersedes (retires) the one before
        write(
            runtime,
            ALPHA,
            f"the pipeline {n} is green",
            subject=f"build-{n}",
            attribute="state",
            value="green",
        )
    runtime.reads.wait_for(runtime.ledger.head_position())
    allowed = {ref for ref, (who, _) in written.items() if who in (ALPHA, ENG)} - set(retired)
    search = runtime.reads.search
    q = SearchQuery(query=QUERY, k=10)
    with search.view(ALPHA, q, search.embed_later(q.query)) as (view, *_):
        vector = view.vector_lane(10)
        lexical = view.lexical_lane(10)
    assert len(vector) == 10
    assert {h.ref for h in vector} <= allowed
    assert len(lexical) == 10
    assert {h.ref for h in lexical} <= allowed
    with search.view(
        ALPHA, msgspec.structs.replace(q, include_retired=True), search.embed_later(q.query)
    ) as (
        view,
        *_,
    ):
        assert set(retired) & {h.ref for h in view.lexical_lane(10)}  # they were the best candidates
        assert set(retired) & {h.ref for h in view.vector_lane(10)}
