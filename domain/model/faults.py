"""``fault``: the question a working set could not answer, scored absolutely. Pure.

Driver scores are relative (normalized within a result list), so they cannot be held to
a threshold. A fault scores each candidate on a fixed scale instead:
``0.6 · cosine + 0.4 · saturated BM25``, where saturation maps BM25's unbounded score
into [0, 1) (``s / (s + BM25_HALF)``: a score of ``BM25_HALF`` counts one half).
L2 memories answer at ≥ 0.35; otherwise L3 knowledge at ≥ 0.15; otherwise it is a miss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal
from uuid import UUID

COSINE_WEIGHT = 0.6
BM25_WEIGHT = 0.4
BM25_HALF = 2.0
L2_THRESHOLD = 0.35
L3_THRESHOLD = 0.15

Tier = Literal["L2", "L3", "miss"]


def saturate(bm25: float, half: float = BM25_HALF) -> float:
    return bm25 / (bm25 + half) if bm25 > 0 else 0.0


def absolute_score(cosine: float, bm25: float) -> float:
    return COSINE_WEIGHT * max(cosine, 0.0) + BM25_WEIGHT * saturate(bm25)


def ranked(scores: Mapping[UUID, tuple[float, float]]) -> list[tuple[UUID, float]]:
    """(ref, absolute score), best first, ties by ref so the order is deterministic."""
    return sorted(
        ((ref, absolute_score(c, b)) for ref, (c, b) in scores.items()), key=lambda x: (-x[1], x[0])
    )


def decide_tier(best_l2: float | None, best_l3: float | None) -> Tier:
    if best_l2 is not None and best_l2 >= L2_THRESHOLD:
        return "L2"
    if best_l3 is not None and best_l3 >= L3_THRESHOLD:
        return "L3"
    return "miss"
