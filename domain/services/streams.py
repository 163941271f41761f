"""Loading decider state from the ledger, through a per-process cache of stream states.

The cache may be stale (another process appended): that is safe, because every
decision appends to the streams it read at the next version, so a stale read ends in
a StreamConflict and the caller re-decides on fresh state.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    DisputeOpened,
    DisputeResolved,
    Event,
    MemoryErased,
    MemoryReaffirmed,
    MemoryReembedded,
    MemoryReleased,
    MemoryRetired,
    MemorySuperseded,
    MemoryVerified,
    MemoryWritten,
)
from memwarden.domain.model.memory import (
    Claim,
    DisputeState,
    MemoryState,
    evolve_claim,
    evolve_dispute,
    evolve_memory,
)
from memwarden.domain.ports import CommandLedger

S = TypeVar("S")


class StreamCache:
    def __init__(self, capacity: int = 100_000) -> None:
        self._capacity = capacity
        self._items: OrderedDict[UUID, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, stream_id: UUID) -> Any:
        with self._lock:
            value = self._items.get(stream_id)
            if value is not None:
                self._items.move_to_end(stream_id)
            return value

    def put(self, stream_id: UUID, state: Any) -> None:
        with self._lock:
            self._items[stream_id] = state
            self._items.move_to_end(stream_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def drop(self, stream_ids: Iterable[UUID]) -> None:
        with self._lock:
            for stream_id in stream_ids:
                self._items.pop(stream_id, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def fold(events: Iterable[Recorded], evolve: Callable[[S | None, Event], S]) -> S | None:
    state: S | None = None
    for recorded in events:
        state = evolve(state, recorded.event)
    return state


def versions_of(*groups: Iterable[Claim | MemoryState | DisputeState]) -> dict[UUID, int]:
    """The stream version of every state read: what a decision on them expects to extend."""
    return {state.id: state.version for group in groups for state in group}


class Streams:
    """Typed loaders for the three kinds of state the deciders read."""

    def __init__(self, ledger: CommandLedger, cache: StreamCache | None = None) -> None:
        self.ledger = ledger
        self.cache = cache or StreamCache()

    def claims(
        self, wanted: Sequence[tuple[UUID, ClaimKind, str]], assume_absent: frozenset[UUID] = frozenset()
    ) -> dict[UUID, Claim]:
        """Claims by id; a missing stream is an empty claim at version 0.

        Ids in ``assume_absent`` that are not cached are not looked up: if the guess is
        wrong the append conflicts and the caller retries without the guess.
        """
        found: dict[UUID, Claim] = {}
        missing: list[UUID] = []
        for claim_id, _, _ in wanted:
            cached = self.cache.get(claim_id)
            if isinstance(cached, Claim):
                found[claim_id] = cached
            elif claim_id not in assume_absent:
                missing.append(claim_id)
        heads = self.ledger.stream_heads(missing) if missing else {}
        for claim_id, kind, namespace in wanted:
            if claim_id in found:
                continue
            head = heads.get(claim_id)
            if head is not None and isinstance(head.event, ClaimSet):
                claim = msgspec.structs.replace(
                    evolve_claim(None, head.event), version=head.originator_version
                )
                self.cache.put(claim_id, claim)
            else:
                claim = Claim(id=claim_id, kind=kind, namespace=namespace)
            found[claim_id] = claim
        return found

    def memories(
        self, memory_ids: Iterable[UUID], others: dict[UUID, list[Recorded]] | None = None
    ) -> dict[UUID, MemoryState]:
        """Memories by id. ``others``: where the streams among the ids that are not memories
        go, unfolded (for ids that may name something else, e.g. a knowledge document);
        without it such a stream fails the fold."""
        return self._folded(memory_ids, MemoryState, evolve_memory, others, MemoryWritten)

    def disputes(self, dispute_ids: Iterable[UUID]) -> dict[UUID, DisputeState]:
        return self._folded(dispute_ids, DisputeState, evolve_dispute)

    def _folded(
        self,
        ids: Iterable[UUID],
        kind: type[S],
        evolve: Callable[[S | None, Event], S],
        others: dict[UUID, list[Recorded]] | None = None,
        first: type[Event] = Event,
    ) -> dict[UUID, S]:
        found: dict[UUID, S] = {}
        missing: list[UUID] = []
        for stream_id in dict.fromkeys(ids):
            cached = self.cache.get(stream_id)
            if isinstance(cached, kind):
                found[stream_id] = cached
            else:
                missing.append(stream_id)
        if missing:
            for stream_id, events in self.ledger.streams(missing).items():
                if others is not None and not isinstance(events[0].event, first):
                    others[stream_id] = events
                    continue
                state = fold(events, evolve)
                if state is not None:
                    self.cache.put(stream_id, state)
                    found[stream_id] = state
        return found

    def remember(self, recorded: Sequence[Recorded]) -> None:
        """After a successful append: advance cached states with what was just written."""
        for r in recorded:
            event, version = r.event, r.originator_version
            if isinstance(event, ClaimSet):
                claim = evolve_claim(None, event)
                self.cache.put(r.originator_id, msgspec.structs.replace(claim, version=version))
                continue
            cached = self.cache.get(r.originator_id)
            if isinstance(event, MemoryWritten | DisputeOpened):
                cached = None
            elif cached is None or cached.version != version - 1:
                self.cache.drop([r.originator_id])
                continue
            evolve = _EVOLVERS.get(type(event))
            if evolve is not None:
                self.cache.put(r.originator_id, evolve(cached, event))


_EVOLVERS: dict[type[Event], Callable[[Any, Event], Any]] = {
    **dict.fromkeys(
        (
            MemoryWritten,
            MemorySuperseded,
            MemoryReleased,
            MemoryRetired,
            MemoryReaffirmed,
            MemoryVerified,
            MemoryErased,
            MemoryReembedded,
        ),
        evolve_memory,
    ),
    DisputeOpened: evolve_dispute,
    DisputeResolved: evolve_dispute,
}
