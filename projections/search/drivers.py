"""Search drivers: retrieval engines behind the scoped view.

A driver takes a ``ScopedView`` (read-only, already inside the caller's scope) and a
request, and returns references (``Hit``), best first. It never sees a connection, so it
can neither widen the scope nor write. The namespace policy picks one by name; the
conformance kit (projections/search/conformance.py) checks any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol
from uuid import UUID

import msgspec
import numpy as np
import numpy.typing as npt

from memwarden.domain.settings import RERANK_AGREEMENT, RERANK_WHEN
from memwarden.projections.search.stages import stage
from memwarden.projections.search.view import Hit, ScopedView

MIN_CANDIDATES = 40
CANDIDATES_PER_RESULT = 4
VECTOR_WEIGHT = 0.4
"""The vector lane's share of a hybrid score (the lexical lane has the rest)."""
CONTEXT_WEIGHT = 0.5
CONTEXT_SPAN = 2
"""How much of a hit's score its write-order neighbours get, and how far away they may be."""


RERANK_DEPTH = 30
"""How many of the hybrid driver's best a reranker reorders (the rest keep their order)."""
RERANK_WEIGHT = 1.0
"""The reranker's share of a reranked hit's score, beside its hybrid score (``reranked``)."""


class Reranker(Protocol):
    """Scores passages against a query, higher is more relevant (a cross-encoder)."""

    def score(self, query: str, passages: Sequence[str]) -> npt.NDArray[np.float32]: ...


class SearchRequest(msgspec.Struct, frozen=True, kw_only=True):
    query: str
    k: int = 10
    token_budget: int | None = None


class Driver(Protocol):
    @property
    def name(self) -> str: ...

    def search(self, view: ScopedView, request: SearchRequest) -> list[Hit]: ...


def candidates_for(k: int) -> int:
    return max(MIN_CANDIDATES, k * CANDIDATES_PER_RESULT)


def normalized(hits: Sequence[Hit]) -> dict[UUID, float]:
    """Min-max onto [0, 1] within one lane (a lone or all-equal lane scores 1)."""
    if not hits:
        return {}
    top, bottom = max(h.score for h in hits), min(h.score for h in hits)
    spread = top - bottom
    return {h.ref: (h.score - bottom) / spread if spread > 0 else 1.0 for h in hits}


def merge(lanes: Sequence[tuple[float, Sequence[Hit]]]) -> list[Hit]:
    """Weighted sum of normalized lanes, deduplicated by reference, best first (ties by id)."""
    total: dict[UUID, float] = {}
    for weight, hits in lanes:
        for ref, score in normalized(hits).items():
            total[ref] = total.get(ref, 0.0) + weight * score
    return best_first(total)


def best_first(scores: Mapping[UUID, float]) -> list[Hit]:
    return sorted((Hit(ref, score) for ref, score in scores.items()), key=lambda h: (-h.score, h.ref))


def with_context(
    hits: Sequence[Hit], neighbours: Sequence[tuple[UUID, UUID, int]], weight: float
) -> list[Hit]:
    """Each memory gains ``weight / d`` of the best score among the hits ``d`` places from it
    in its namespace's write order (``neighbours``: ``(hit, neighbour, d)``), summed over d.

    Why: what is written in a row is read in a row. A question's answer is often the turn
    after the one that matches its words ("What did you take away from it?" -> the reply),
    and a fact's subject is often named only in the memory before it (the recall it adds:
    docs/design-figures.md, Search)."""
    score = {h.ref: h.score for h in hits}
    lent: dict[tuple[UUID, int], float] = {}
    for source, ref, distance in neighbours:
        key = (ref, distance)
        lent[key] = max(lent.get(key, 0.0), score.get(source, 0.0))
    total = dict(score)
    for (ref, distance), lender in lent.items():
        total[ref] = total.get(ref, 0.0) + weight / distance * lender
    return best_first(total)


def within_budget(hits: Sequence[Hit], tokens: Mapping[UUID, int], budget: int | None, k: int) -> list[Hit]:
    """At most ``k`` hits whose token estimates fit ``budget``; the top hit always stays.
    A hit that does not fit is skipped (never cut), and smaller ones after it may still fit."""
    kept: list[Hit] = []
    used = 0
    for hit in hits:
        if len(kept) == k:
            break
        cost = tokens.get(hit.ref, 1)
        if kept and budget is not None and used + cost > budget:
            continue
        kept.append(hit)
        used += cost
    return kept


def finish(view: ScopedView, hits: list[Hit], request: SearchRequest) -> list[Hit]:
    if request.token_budget is None:
        return hits[: request.k]
    head = hits[: candidates_for(request.k)]
    return within_budget(head, view.token_estimates([h.ref for h in head]), request.token_budget, request.k)


def reranked(
    view: ScopedView,
    hits: list[Hit],
    query: str,
    reranker: Reranker,
    depth: int,
    weight: float = RERANK_WEIGHT,
) -> list[Hit]:
    """The first ``depth`` hits reordered by their hybrid score (over the best one's) plus
    ``weight`` times the reranker's relevance (the logit's sigmoid), all above the hits
    after them, which keep their order. A hit whose content the view no longer shows keeps
    its place behind the reranked ones.

    Why fused, not the reranker's order alone: the fused order recalls more at ten than
    either alone (docs/design-figures.md, Search): the lanes and the write-order context know
    things the cross-encoder, reading one memory at a time, cannot."""
    head, tail = hits[:depth], hits[depth:]
    rows = view.memory_rows([h.ref for h in head])
    scored = [h for h in head if h.ref in rows and rows[h.ref]["content"] is not None]
    if not scored:
        return hits
    logits = reranker.score(query, [rows[h.ref]["content"] for h in scored])
    best = max(h.score for h in scored)
    scale = best if best > 0 else 1.0
    floor = max((h.score for h in tail), default=0.0)  # every reranked hit stays above the tail
    lifted = {
        h.ref: floor + h.score / scale + weight * float(1.0 / (1.0 + np.exp(-float(logit))))
        for h, logit in zip(scored, logits, strict=True)
    }
    rest = [h for h in head if h.ref not in lifted]
    return best_first(lifted) + rest + tail


class LanesDisagree:
    """Whether a search's hybrid ranking is worth the reranker's time: when the lexical and
    the vector lane agree on most of their best ``k`` (``agreement``: the share of the one's
    also among the other's), the fused order stands on two independent kinds of evidence and
    the cross-encoder seldom changes which memories make the top k; where they disagree, the
    fusion had to pick between them, and a cross-encoder reading query and passage together
    is the judge. A lane that found nothing (no query terms, no vectors) cannot agree."""

    def __init__(self, agreement: float = RERANK_AGREEMENT) -> None:
        if not 0.0 <= agreement <= 1.0:
            raise ValueError("agreement must be between 0 and 1")
        self.agreement = agreement

    def __call__(self, lexical: Sequence[Hit], vector: Sequence[Hit], k: int) -> bool:
        words, meanings = {h.ref for h in lexical[:k]}, {h.ref for h in vector[:k]}
        if not words or not meanings:
            return True
        return len(words & meanings) < self.agreement * min(k, len(words), len(meanings))


class HybridDriver:
    """The baseline: vector and lexical lanes, each normalized and merged (vector weight
    0.4, lexical 0.6), then each memory lent part of its write-order neighbours' scores
    (see ``with_context``; ``context_weight=0`` turns that off); with a ``reranker``, its
    best ``rerank_depth`` reordered by it (``reranked``), on every search or, with a
    ``rerank_when`` (``LanesDisagree``), on the searches it picks."""

    name = "hybrid"

    def __init__(
        self,
        vector_weight: float = VECTOR_WEIGHT,
        context_weight: float = CONTEXT_WEIGHT,
        context_span: int = CONTEXT_SPAN,
        reranker: Reranker | None = None,
        rerank_depth: int = RERANK_DEPTH,
        rerank_weight: float = RERANK_WEIGHT,
        rerank_when: LanesDisagree | None = None,
    ) -> None:
        if rerank_depth < 1:
            raise ValueError("rerank_depth must be at least 1")
        self.vector_weight = vector_weight
        self.context_weight = context_weight
        self.context_span = context_span
        self.reranker = reranker
        self.rerank_depth = rerank_depth
        self.rerank_weight = rerank_weight
        self.rerank_when = rerank_when

    def search(self, view: ScopedView, request: SearchRequest) -> list[Hit]:
        n = candidates_for(request.k)
        # Each lane reads its hits' write-order neighbours in its own statement (the lexical
        # lane's while the query is still being embedded), so the context costs no round trip.
        span = self.context_span if self.context_weight > 0 else 0
        with stage("lexical lane"):
            lexical = view.lexical_lane(n, span)
        with stage("vector lane (with the query's embedding wait)"):
            vector = view.vector_lane(n, span) if view.has_vectors else []
        with stage("fusion and context"):
            merged = merge([(self.vector_weight, vector), (1.0 - self.vector_weight, lexical)])
            if self.context_weight > 0 and merged:
                nearby = view.neighbours([h.ref for h in merged], self.context_span)
                merged = with_context(merged, nearby, self.context_weight)
        if self.reranker is not None and merged and self._reranks(lexical, vector, request.k):
            with stage("rerank"):
                merged = reranked(
                    view, merged, request.query, self.reranker, self.rerank_depth, self.rerank_weight
                )
        with stage("finish (budget, visibility)"):
            return finish(view, merged, request)

    def _reranks(self, lexical: Sequence[Hit], vector: Sequence[Hit], k: int) -> bool:
        return self.rerank_when is None or self.rerank_when(lexical, vector, k)


class LexicalDriver:
    """BM25 alone: what search degrades to when the embedder is down."""

    name = "lexical"

    def search(self, view: ScopedView, request: SearchRequest) -> list[Hit]:
        return finish(view, view.lexical_lane(candidates_for(request.k)), request)


class VectorDriver:
    """Cosine alone (for measurement: the LoCoMo benchmark's vector-only column)."""

    name = "vector"

    def search(self, view: ScopedView, request: SearchRequest) -> list[Hit]:
        return finish(view, view.vector_lane(candidates_for(request.k)), request)


BASELINE = "baseline"


def policy_drivers(
    reranker: Reranker | None = None,
    rerank_depth: int = RERANK_DEPTH,
    rerank_when: str = "adaptive",
    agreement: float = RERANK_AGREEMENT,
) -> dict[str, Driver]:
    """The drivers a namespace policy may name (domain/model/policies.py ``DRIVERS``);
    ``reranker``: the hybrid driver's reranking stage (``MEMWARDEN_RERANK``), if any, run
    where the lanes disagree (by less than ``agreement``) or always (``rerank_when``,
    ``MEMWARDEN_RERANK_WHEN``)."""
    if rerank_when not in RERANK_WHEN:
        raise ValueError(f"rerank_when must be one of {', '.join(RERANK_WHEN)}, not {rerank_when!r}")
    gate = LanesDisagree(agreement) if rerank_when == "adaptive" else None
    hybrid = HybridDriver(reranker=reranker, rerank_depth=rerank_depth, rerank_when=gate)
    return {BASELINE: hybrid, "hybrid": hybrid, "lexical": LexicalDriver()}
