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

from projections.search.view import Hit, ScopedView

MIN_CANDIDATES = 40
CANDIDATES_PER_RESULT = 4


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
    return sorted((Hit(ref, score) for ref, score in total.items()), key=lambda h: (-h.score, h.ref))


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


class HybridDriver:
    """The baseline: vector and lexical lanes, each normalized, merged 0.5/0.5."""

    name = "hybrid"

    def __init__(self, vector_weight: float = 0.5) -> None:
        self.vector_weight = vector_weight

    def search(self, view: ScopedView, request: SearchRequest) -> list[Hit]:
        n = candidates_for(request.k)
        lexical = view.lexical_lane(n)
        vector = view.vector_lane(n) if view.has_vectors else []
        merged = merge([(self.vector_weight, vector), (1.0 - self.vector_weight, lexical)])
        return finish(view, merged, request)


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


def policy_drivers() -> dict[str, Driver]:
    """The drivers a namespace policy may name (domain/model/policies.py ``DRIVERS``)."""
    hybrid = HybridDriver()
    return {BASELINE: hybrid, "hybrid": hybrid, "lexical": LexicalDriver()}
