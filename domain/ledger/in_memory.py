"""The ledger's command port (``domain.ports.CommandLedger``) in memory, for unit tests of
the command runner and the services: no database, no I/O.

It keeps what the services rely on, the way the PostgreSQL ledger does it: an append is
all or nothing, refused whole (``StreamConflict``) when a stream version it takes is
taken already (``IntegrityError`` when it names one twice itself); positions are gapless from 1; every event is
stored as the sealing mapper encodes it (sealed fields encrypted with their owner's data
key, stored with the append that makes it) and read back by decoding, so what a service
appends must decode again; a destroyed data key leaves its owner's sealed fields empty;
each event is linked into the hash chain by the same formula (``chain.canonical``), which
``verify`` recomputes. What it leaves out: tenant chains, checkpoints, signing, the audit
spool, group commit. tests/integration/test_ledger_conformance.py runs the same
assertions on it and on the PostgreSQL ledger, so the two cannot drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple
from uuid import UUID

from eventsourcing.persistence import IntegrityError, StoredEvent

from memwarden.domain.ledger.app import NewMemoryKey, StreamConflict
from memwarden.domain.ledger.audit_spool import AuditSpool
from memwarden.domain.ledger.chain import GENESIS, ChainReport, canonical, link, verify_rows
from memwarden.domain.ledger.entropy import random_bytes
from memwarden.domain.ledger.keys import KEK_BYTES, KeyEncryptionKey
from memwarden.domain.ledger.mapper import Recorded, SealingMapper, StoredRow
from memwarden.domain.ledger.sealing import DataKeys
from memwarden.domain.ports import CommandLedger


class _Row(NamedTuple):
    """An event as the events table holds it, with its chain link."""

    stream: UUID
    stored: StoredEvent
    tenant: str
    hash: bytes


class InMemoryLedger:
    """An append-only, hash-chained, sealed ledger in one process's memory."""

    audit_spool: AuditSpool | None = None
    """None: an append never fails for want of a database, so nothing waits in a spool."""

    def __init__(self, kek: KeyEncryptionKey | None = None) -> None:
        self.kek = kek or KeyEncryptionKey(random_bytes(KEK_BYTES))
        self._wrapped: dict[UUID, bytes] = {}
        """The ``data_keys`` table: each owner's data key, wrapped by the KEK."""
        self.data_keys = DataKeys(self.kek, self._load_wrapped)
        self.sealing = SealingMapper(self.data_keys)
        self._rows: list[_Row] = []
        self._streams: dict[UUID, list[int]] = {}
        """Each stream's positions."""
        self._taken: set[tuple[UUID, int]] = set()
        """Every (stream, version) stored: the events table's unique key."""
        self._lock = threading.Lock()

    def _load_wrapped(self, owners: list[UUID]) -> dict[UUID, bytes]:
        with self._lock:
            return {owner: self._wrapped[owner] for owner in owners if owner in self._wrapped}

    def new_data_key(self, owner: UUID) -> NewMemoryKey:
        key, wrapped = self.data_keys.create(owner)
        return NewMemoryKey(owner, key, wrapped)

    # -- writing ---------------------------------------------------------------------------

    def append(
        self,
        events: Sequence[Recorded],
        new_keys: Sequence[NewMemoryKey] = (),
        destroy_keys: Sequence[UUID] = (),
        *,
        tenant: str,
    ) -> int:
        """As ``Ledger.append``: all of ``events`` at their stream versions, or none."""
        fresh = {k.owner: k.key for k in new_keys}
        stored = [self.sealing.encode(r, fresh) for r in events]
        with self._lock:
            taken = [(r.originator_id, r.originator_version) for r in events]
            if len(set(taken)) < len(taken):  # the caller's mistake, not a race: no retry
                raise IntegrityError("a stream version is named twice in this append")
            if not self._taken.isdisjoint(taken):
                raise StreamConflict("a stream this append expected to extend has moved on")
            positions = [
                self._insert(r.originator_id, s, tenant) for r, s in zip(events, stored, strict=True)
            ]
            for k in new_keys:  # as the table's ON CONFLICT DO NOTHING: the first key stays
                self._wrapped.setdefault(k.owner, k.wrapped)
            for owner in destroy_keys:
                self._wrapped.pop(owner, None)
        self.data_keys.remember(fresh.items())
        if destroy_keys:
            self.data_keys.forget(destroy_keys)
        return max(positions)

    def _insert(self, stream: UUID, stored: StoredEvent, tenant: str) -> int:
        position = len(self._rows) + 1
        previous = self._rows[-1].hash if self._rows else GENESIS
        record = canonical(position, stream, stored.originator_version, stored.topic, stored.state)
        self._rows.append(_Row(stream, stored, tenant, link(previous, record)))
        self._streams.setdefault(stream, []).append(position)
        self._taken.add((stream, stored.originator_version))
        return position

    # -- reading ---------------------------------------------------------------------------

    def stream_heads(self, stream_ids: Sequence[UUID]) -> dict[UUID, Recorded]:
        """The latest event of each stream that exists."""
        return {stream: events[-1] for stream, events in self.streams(stream_ids).items()}

    def streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[Recorded]]:
        """Every event of each stream, in version order."""
        with self._lock:
            found = {
                stream: sorted(self._streams[stream], key=self._version_at)
                for stream in dict.fromkeys(stream_ids)
                if stream in self._streams
            }
        return {stream: [self._decoded(p) for p in positions] for stream, positions in found.items()}

    def _version_at(self, position: int) -> int:
        return self._rows[position - 1].stored.originator_version

    def read(self, after: int, limit: int, stop: int | None = None) -> list[Recorded]:
        """Events after a position, in ledger order (the notification log)."""
        upper = len(self._rows) if stop is None else min(stop, len(self._rows))
        return [self._decoded(p, with_row=True) for p in range(after + 1, upper + 1)][:limit]

    def head_position(self) -> int:
        return len(self._rows)

    def _decoded(self, position: int, *, with_row: bool = False) -> Recorded:
        row = self._rows[position - 1]
        stored = row.stored
        kept = StoredRow(stored.topic, stored.state, row.tenant, None) if with_row else None
        return self.sealing.decode(stored, position, kept)

    # -- proving ---------------------------------------------------------------------------

    def verify(self) -> ChainReport:
        """Recompute the chain from the first event; name the first bad position."""
        with self._lock:
            rows = [
                (
                    p,
                    r.stored.originator_id,
                    r.stored.originator_version,
                    r.stored.topic,
                    r.stored.state,
                    p,
                    r.hash,
                )
                for p, r in enumerate(self._rows, start=1)
            ]
        return verify_rows(rows)

    def tamper(self, position: int, state: bytes) -> None:
        """Overwrite the stored state of the event at ``position`` (its chain link kept): what
        a tamper test does to the events table."""
        with self._lock:
            row = self._rows[position - 1]
            stored = StoredEvent(
                originator_id=row.stored.originator_id,
                originator_version=row.stored.originator_version,
                topic=row.stored.topic,
                state=state,
            )
            self._rows[position - 1] = row._replace(stored=stored)


def _meets_the_port(ledger: InMemoryLedger) -> CommandLedger:
    """Never called: mypy checks here that this ledger has the port's every method."""
    return ledger
