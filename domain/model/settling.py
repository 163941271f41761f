"""How a judged contradiction is settled (docs/architecture.md sections 4 step 7 and 5): one rule
for the synchronous band of a write and for the autopilot's pass, so the dial of the namespace,
not the moment the pair was judged, decides whether a person is asked. Pure.

- ``auto``: the higher rank wins, equal rank -> the newer;
- ``lower_trust``: automatic only when the newer outranks the older, else a finding;
- ``all``: always a finding.

A neighbour in another namespace is never settled automatically (a write or a pass never
closes a memory outside its own namespace): a finding.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

import msgspec

from memwarden.domain.model.events import ConflictReview, ConflictSettled, FindingOpened
from memwarden.domain.model.judging import Judgement
from memwarden.domain.model.memory import MemoryState

Settlement = Literal["newer", "older", "finding"]
"""Which of a contradicting pair wins automatically, or that a person decides."""


class Pair(msgspec.Struct, frozen=True, kw_only=True):
    """A neighbour judged against a newer memory, and how alike the two are."""

    neighbour: MemoryState
    cosine: float
    judgement: Judgement


def settlement(dial: ConflictReview, newer_rank: int, older: MemoryState, same_namespace: bool) -> Settlement:
    if dial == "all" or not same_namespace:
        return "finding"
    if dial == "auto":
        return "newer" if newer_rank >= older.rank else "older"
    return "newer" if newer_rank > older.rank else "finding"  # lower_trust


def finding_opened(
    namespace: str, newer: UUID, pair: Pair, judge: str, now: datetime, finding_id: UUID
) -> FindingOpened:
    """A contradiction left to a person: ``memory_a`` the older, ``memory_b`` the newer."""
    return FindingOpened(
        finding_id=finding_id,
        namespace=namespace,
        memory_a=pair.neighbour.id,
        memory_b=newer,
        judge=judge,
        rule=pair.judgement.rule,
        explanation=pair.judgement.explanation,
        cosine=round(pair.cosine, 6),
        at=now,
    )


def conflict_settled(
    namespace: str,
    winner: UUID,
    loser: UUID,
    pair: Pair,
    judge: str,
    dial: ConflictReview,
    now: datetime,
    decision_id: UUID,
) -> ConflictSettled:
    """An automatic settlement, as a decision a reviewer may overturn."""
    return ConflictSettled(
        decision_id=decision_id,
        namespace=namespace,
        winner=winner,
        loser=loser,
        judge=judge,
        rule=pair.judgement.rule,
        explanation=pair.judgement.explanation,
        dial=dial,
        at=now,
    )
