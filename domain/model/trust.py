"""The trust lattice: a memory's rank is the highest rank among its provenance sources."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

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
OverCap = Literal["cap", "refuse"]
OVER_CAP: tuple[OverCap, ...] = ("cap", "refuse")
"""What a write whose provenance claim is above its key's ``max_provenance`` gets (namespace
policy ``provenance_over_cap``): the claim lowered to the cap and audited (default), or a 400."""


def default_provenance_cap(human: bool) -> str:
    """The highest source a key may claim when whoever made it set none: a person may claim
    ``manual``; an agent only what it heard (``conversation``), since an agent that says
    ``document`` would otherwise outrank every honest agent."""
    return "manual" if human else DEFAULT_SOURCE


def source_rank(source: str) -> int:
    try:
        return SOURCE_RANKS[source]
    except KeyError:
        known = ", ".join(SOURCE_RANKS)
        raise InvalidRequest(f"unknown provenance source {source!r}; known: {known}") from None


def rank_of(sources: Iterable[str]) -> int:
    return max((source_rank(s) for s in sources), default=0)
