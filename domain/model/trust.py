"""The trust lattice: a memory's rank is the highest rank among its provenance sources."""

from __future__ import annotations

from collections.abc import Iterable

from memwarden.domain.model.errors import InvalidRequest

SOURCE_RANKS: dict[str, int] = {
    "manual": 50,
    "document": 40,
    "live-fetch": 40,
    "consolidation": 30,
    "swap-import": 20,
    "conversation": 10,
}
HUMAN_ONLY_SOURCES = frozenset({"manual"})
DEFAULT_SOURCE = "conversation"


def source_rank(source: str) -> int:
    try:
        return SOURCE_RANKS[source]
    except KeyError:
        known = ", ".join(SOURCE_RANKS)
        raise InvalidRequest(f"unknown provenance source {source!r}; known: {known}") from None


def rank_of(sources: Iterable[str]) -> int:
    return max((source_rank(s) for s in sources), default=0)
