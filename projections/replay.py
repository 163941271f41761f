"""The proof: answer an as-of question by folding the ledger, not by reading a projection.

The engine reads the notification log in position order up to ``position(T)`` (the rule
in domain/model/asof.py), folds every memory event of the caller's scope with the
domain's own ``evolve_memory`` into an in-memory model, and answers from it. It shares
nothing with the ``memory_timeline`` projection but the rules, so when the two agree the
projection is faithful to the ledger.

Snapshots (``replay_snapshots``) make it fast: every N events, the whole model (every
namespace) as it stood at that position, with the sealed and descriptive fields
(content, value, tags, selectors, provenance, verifications) stripped: no plaintext is
ever copied out of the ledger, so erasure still holds. A snapshot at position s is used
for T when every event up to s is known at T (its running maximum of ``at`` <= T); the
content of an answer from a snapshot is read back from the memory's own stream (a
destroyed data key reads as null).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Container, Iterable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from msgspec.structs import replace
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.asof import (
    AsOfAnswer,
    AsOfMemory,
    answers,
    is_erasure,
    is_memory_event,
    matches_query,
    standing_of,
)
from memwarden.domain.model.events import MemoryWritten
from memwarden.domain.model.memory import MemoryState, evolve_memory
from memwarden.domain.model.scopes import Subtree
from memwarden.projections.sanitize import sanitized, storable_text

READ_BATCH = 5000
SNAPSHOT_TABLE = "replay_snapshots"
"""Made by migration 0002_read_models."""
DEFAULT_SNAPSHOT_EVERY = 100_000

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[MemoryState])


def fold_memory(state: MemoryState | None, event: Any) -> MemoryState | None:
    """``evolve_memory``, plus erasure: a tombstone whatever the fold knew before."""
    if is_erasure(event):
        if state is None:
            return None
        with contextlib.suppress(TypeError):  # an evolve that predates erasure
            state = evolve_memory(state, event)
        return replace(
            state, status="erased", content=None, value=None, retired_at=state.retired_at or event.at
        )
    return evolve_memory(state, event)


def strip(state: MemoryState) -> MemoryState:
    """What a snapshot keeps: no sealed content, nothing an as-of answer does not read."""
    return replace(state, content=None, value=None, tags=(), selectors=(), provenance=(), verifications=())


class ReplayStats(msgspec.Struct, kw_only=True):
    snapshot_position: int = 0
    events_read: int = 0
    seconds: float = 0.0


class ReplayEngine:
    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.schema = ledger.schema
        self.last = ReplayStats()

    # -- answering --------------------------------------------------------------------------

    def answer(
        self,
        scope: Sequence[str] | Subtree,
        as_of: datetime,
        valid_at: datetime | None = None,
        *,
        query: str | None = None,
        limit: int | None = None,
        after: UUID | None = None,
        upto: int | None = None,
        snapshots: bool = True,
    ) -> AsOfAnswer:
        started = time.perf_counter()
        valid_at = valid_at or as_of
        cap = self.ledger.head_position() if upto is None else upto
        in_scope: Container[str] = scope if isinstance(scope, Subtree) else frozenset(scope)
        states: dict[UUID, MemoryState] = {}
        from_snapshot: set[UUID] = set()
        start = 0
        if snapshots:
            found = self.snapshot_for(as_of, cap)
            if found is not None:
                start, loaded = found
                for state in loaded:
                    if state.namespace in in_scope:
                        states[state.id] = state
                        from_snapshot.add(state.id)
        stats = ReplayStats(snapshot_position=start)
        position, read = self._fold(states, start, cap, as_of, in_scope)
        stats.events_read = read
        chosen = sorted(
            (s for s in states.values() if answers(standing_of(s), in_scope, valid_at)), key=lambda s: s.id
        )
        if after is not None:
            chosen = [s for s in chosen if s.id > after]
        contents = self._contents([s.id for s in chosen if s.id in from_snapshot])
        memories: list[AsOfMemory] = []
        for state in chosen:
            content = contents.get(state.id) if state.id in from_snapshot else state.content
            if not matches_query(content, query):
                continue
            memories.append(_to_memory(state, content))
            if limit is not None and len(memories) >= limit:
                break
        stats.seconds = time.perf_counter() - started
        self.last = stats
        return AsOfAnswer(
            as_of=as_of, valid_at=valid_at, position=position, memories=memories, engine="replay"
        )

    def _fold(
        self,
        states: dict[UUID, MemoryState],
        start: int,
        cap: int,
        as_of: datetime,
        scope: Container[str] | None,
    ) -> tuple[int, int]:
        """Fold events after ``start`` until the first one later than ``as_of`` (or ``cap``);
        return ``position(T)`` and the number of events read. ``scope`` None = every namespace."""
        position, read = start, 0
        while position < cap:
            batch = self._read(position, cap)
            if not batch:
                break
            for recorded in batch:
                if recorded.event.at > as_of:
                    return int(recorded.position or 0) - 1, read
                read += 1
                position = int(recorded.position or 0)
                _apply(states, recorded, scope)
        return cap, read

    def _contents(self, ids: list[UUID]) -> dict[UUID, str | None]:
        found: dict[UUID, str | None] = {}
        for chunk_start in range(0, len(ids), 1000):
            streams = self.ledger.streams(ids[chunk_start : chunk_start + 1000])
            for memory_id, events in streams.items():
                first = events[0].event if events else None
                content = first.content if isinstance(first, MemoryWritten) else None
                found[memory_id] = None if content is None else storable_text(content)
        return found

    def _read(self, after: int, stop: int) -> list[Recorded]:
        """The next events up to ``stop``, as the projections see them (projections/sanitize.py):
        so the replay answers what the SQL answers, whatever an older version let in."""
        return sanitized(self.ledger.read(after, READ_BATCH, stop=stop))

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_for(self, as_of: datetime, cap: int) -> tuple[int, list[MemoryState]] | None:
        """The latest snapshot whose every event is known at ``as_of``, at or before ``cap``."""
        with self.ledger.datastore.get_connection() as conn:
            row = conn.execute(
                SQL(
                    "SELECT position, state FROM {s}.{t} WHERE high_at <= %s AND position <= %s"
                    " ORDER BY position DESC LIMIT 1"
                ).format(s=Identifier(self.schema), t=Identifier(SNAPSHOT_TABLE)),
                (as_of, cap),
            ).fetchone()
        if row is None:
            return None
        return int(row["position"]), _decoder.decode(bytes(row["state"]))

    def snapshots(self) -> list[tuple[int, datetime, int, int]]:
        """(position, high_at, memories, bytes) of each snapshot."""
        with self.ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL(
                    "SELECT position, high_at, memories, octet_length(state) AS size FROM {s}.{t}"
                    " ORDER BY position"
                ).format(s=Identifier(self.schema), t=Identifier(SNAPSHOT_TABLE))
            ).fetchall()
        return [(int(r["position"]), r["high_at"], int(r["memories"]), int(r["size"])) for r in rows]

    def take_snapshots(
        self, every: int = DEFAULT_SNAPSHOT_EVERY, progress: Callable[[int, int], None] | None = None
    ) -> list[int]:
        """Fold the whole log from the latest snapshot, saving one every ``every`` positions."""
        head = self.ledger.head_position()
        states: dict[UUID, MemoryState] = {}
        position = 0
        high: datetime | None = None
        with self.ledger.datastore.get_connection() as conn:
            row = conn.execute(
                SQL("SELECT position, high_at, state FROM {s}.{t} ORDER BY position DESC LIMIT 1").format(
                    s=Identifier(self.schema), t=Identifier(SNAPSHOT_TABLE)
                )
            ).fetchone()
        if row is not None:
            position, high = int(row["position"]), row["high_at"]
            states = {s.id: s for s in _decoder.decode(bytes(row["state"]))}
        mark = (position // every + 1) * every
        saved: list[int] = []
        while position < head:
            batch = self._read(position, head)
            if not batch:
                break
            for recorded in batch:
                position = int(recorded.position or 0)
                at = recorded.event.at
                high = at if high is None or at > high else high
                _apply(states, recorded, None)
                if position >= mark:
                    assert high is not None
                    self._save(position, high, states.values())
                    saved.append(position)
                    mark = (position // every + 1) * every
            if progress is not None:
                progress(position, head)
        return saved

    def _save(self, position: int, high: datetime, states: Iterable[MemoryState]) -> None:
        stripped = [strip(s) for s in states]
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {s}.{t} (position, high_at, memories, state) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (position) DO NOTHING"
                ).format(s=Identifier(self.schema), t=Identifier(SNAPSHOT_TABLE)),
                (position, high, len(stripped), _encoder.encode(stripped)),
            )

    def drop_snapshots(self) -> None:
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL("TRUNCATE {s}.{t}").format(s=Identifier(self.schema), t=Identifier(SNAPSHOT_TABLE))
            )


def _apply(states: dict[UUID, MemoryState], recorded: Recorded, scope: Container[str] | None) -> None:
    event = recorded.event
    if isinstance(event, MemoryWritten):
        if scope is None or event.namespace in scope:
            states[event.memory_id] = evolve_memory(None, event)
        return
    if not (is_memory_event(event) or is_erasure(event)):
        return
    memory_id: UUID | None = getattr(event, "memory_id", None)
    if memory_id is None:
        return
    state = states.get(memory_id)
    if state is None:
        return  # outside the scope
    folded = fold_memory(state, event)
    if folded is not None:
        states[memory_id] = folded


def _to_memory(state: MemoryState, content: str | None) -> AsOfMemory:
    return AsOfMemory(
        id=state.id,
        namespace=state.namespace,
        content=content,
        status=state.status,
        trust_tier=state.trust_tier,
        recorded_at=state.recorded_at,
        valid_from=state.valid_from,
        valid_to=state.valid_to,
        retired_at=state.retired_at,
    )
