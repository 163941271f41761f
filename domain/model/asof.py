"""Time travel, the rules (docs/architecture.md section 3, "Bitemporal reads"). Pure: no clock, no I/O.

Which events are *known at T*
-----------------------------
Every event carries ``at``, the decision time the service passed in. The ledger is
ordered by position, and ``at`` is monotone per stream but not across streams (two
writers' clocks interleave). The rule both engines use (the SQL projection and the
replay) is a *prefix* of the notification log:

    position(T) = (the position of the first event whose ``at`` is later than T) - 1,
                  or the head when no event is later than T.

Everything at or before ``position(T)`` is known at T; nothing after it is, even a
straggler whose own ``at`` is earlier (it was appended after a later decision, so the
system could not have known it yet at T). A prefix keeps the answer a real state the
ledger passed through, so it can be replayed exactly.

What is believed at T, and true at V
------------------------------------
The memories whose state, after folding the events up to ``position(T)``, is ``active``
(recorded, or released from quarantine by a review) and not retired or erased, with
their status and trust tier as they stood then. With ``valid_at`` V, only those that
hold at V by that knowledge: ``valid_from <= V < valid_to`` (``valid_to`` null = open).
``valid_at`` defaults to ``as_of``; a plain read is both at now.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import datetime
from uuid import UUID

import msgspec
from msgspec.structs import replace

from memwarden.domain.model.events import (
    Event,
    MemoryEvent,
    MemoryReaffirmed,
    MemoryReleased,
    MemoryRetired,
    MemoryStatus,
    MemorySuperseded,
    MemoryVerified,
    MemoryWritten,
    TrustTier,
)
from memwarden.domain.model.memory import MemoryState

ERASED_EVENT = "MemoryErased"
"""The erasure event (crypto-shredding, docs/architecture.md section 8), recognised by name."""


class Standing(msgspec.Struct, frozen=True, kw_only=True):
    """What the bitemporal reads need of a memory at one instant of system time."""

    namespace: str
    status: MemoryStatus
    trust_tier: TrustTier
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    retired_at: datetime | None = None


def standing_of(state: MemoryState) -> Standing:
    return Standing(
        namespace=state.namespace,
        status=state.status,
        trust_tier=state.trust_tier,
        recorded_at=state.recorded_at,
        valid_from=state.valid_from,
        valid_to=state.valid_to,
        retired_at=state.retired_at,
    )


def is_erasure(event: Event) -> bool:
    return type(event).__name__ == ERASED_EVENT


def is_memory_event(event: Event) -> bool:
    return isinstance(event, MemoryEvent)


def evolve_standing(standing: Standing | None, event: Event) -> Standing | None:
    """The standing after one memory event: the projection's fold, kept equal to
    ``evolve_memory`` on these fields (a property test checks it). ``None`` = not a
    memory event this fold knows (the standing is unchanged)."""
    if isinstance(event, MemoryWritten):
        return Standing(
            namespace=event.namespace,
            status=event.status,
            trust_tier=event.trust_tier,
            recorded_at=event.at,
            valid_from=event.valid_from,
        )
    if standing is None:
        return None
    if isinstance(event, MemorySuperseded):
        if event.kind == "succession":
            return replace(standing, valid_to=event.valid_to)
        return replace(standing, status="retired", retired_at=event.at)
    if isinstance(event, MemoryReleased):
        return replace(standing, status="active", trust_tier="canonical")
    if isinstance(event, MemoryRetired):
        return replace(standing, status="retired", retired_at=event.at)
    if isinstance(event, MemoryReaffirmed):
        return replace(standing, trust_tier=event.trust_tier or standing.trust_tier)
    if isinstance(event, MemoryVerified):
        return replace(standing, trust_tier=event.trust_tier)
    if is_erasure(event):
        return erased(standing, event.at)
    return None


def erased(standing: Standing, at: datetime) -> Standing:
    """A tombstone: never current again, whatever came before."""
    return replace(standing, status="erased", retired_at=standing.retired_at or at)


def believed(standing: Standing) -> bool:
    """Believed at the instant this standing reflects: active, not retired, not erased."""
    return standing.status == "active" and standing.retired_at is None


def holds_at(standing: Standing, valid_at: datetime) -> bool:
    """True in the world at ``valid_at`` by this standing's knowledge."""
    return standing.valid_from <= valid_at and (standing.valid_to is None or standing.valid_to > valid_at)


def answers(standing: Standing, scope: Container[str], valid_at: datetime) -> bool:
    return standing.namespace in scope and believed(standing) and holds_at(standing, valid_at)


class AsOfMemory(msgspec.Struct, frozen=True, kw_only=True):
    """One memory in an as-of answer. ``content`` is null for an erased memory (a
    tombstone at every instant, never its content)."""

    id: UUID
    namespace: str
    content: str | None
    status: MemoryStatus
    trust_tier: TrustTier
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None
    retired_at: datetime | None


class AsOfAnswer(msgspec.Struct, frozen=True, kw_only=True):
    as_of: datetime
    valid_at: datetime
    position: int
    memories: list[AsOfMemory]
    next_cursor: str | None = None
    engine: str = "sql"


def matches_query(content: str | None, query: str | None) -> bool:
    """The optional text filter of an as-of read: every whitespace-separated term occurs
    (case-insensitively) in the content. An erased memory matches no query."""
    if not query:
        return True
    if content is None:
        return False
    folded = content.lower()
    return all(term in folded for term in query.lower().split())


def differences(left: AsOfAnswer, right: AsOfAnswer, limit: int = 50) -> list[str]:
    """What differs between two answers to the same question, readable, at most ``limit``."""
    found: list[str] = []
    if left.position != right.position:
        found.append(f"position: {left.engine} {left.position} != {right.engine} {right.position}")
    mine = {m.id: m for m in left.memories}
    theirs = {m.id: m for m in right.memories}
    for memory_id in sorted(mine.keys() | theirs.keys(), key=str):
        a, b = mine.get(memory_id), theirs.get(memory_id)
        if a is None:
            found.append(f"{memory_id}: only in {right.engine}")
        elif b is None:
            found.append(f"{memory_id}: only in {left.engine}")
        elif a != b:
            fields = [
                f"{f} {getattr(a, f)!r} != {getattr(b, f)!r}"
                for f in AsOfMemory.__struct_fields__
                if getattr(a, f) != getattr(b, f)
            ]
            found.append(f"{memory_id}: " + "; ".join(fields))
        if len(found) >= limit:
            break
    return found
