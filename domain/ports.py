"""The ports of the command side: what the services need of the ledger, as a Protocol.

The ledger (``domain.ledger.app.Ledger``, on PostgreSQL) is its implementation in a
deployment; ``domain.ledger.in_memory.InMemoryLedger`` is the other, for unit tests of the
command runner and the services (tests/integration/test_ledger_conformance.py runs the same
assertions on both). The read side's ports are in ``domain/services/ports.py``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol
from uuid import UUID

from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.ledger.audit_spool import AuditSpool
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.ledger.sealing import DataKeys


class CommandLedger(Protocol):
    """The ledger as the command side uses it: load streams, append a syscall's events
    atomically with optimistic concurrency, make the data keys its sealed events need.

    ``append``: every event goes in at its stream version, or none does
    (``StreamConflict`` when another writer took one of those versions); returns the
    global position of the last. ``new_keys``: data keys stored with the append (the
    events are sealed with them); ``destroy_keys``: owners whose data keys the append
    deletes (erasure), after which their events read back with sealed fields empty.
    ``tenant``: whose chain the append goes on (a chain per tenant)."""

    @property
    def audit_spool(self) -> AuditSpool | None:
        """Where an audit record waits while the ledger takes no writes (None: nowhere)."""
        ...

    @property
    def data_keys(self) -> DataKeys: ...

    def new_data_key(self, owner: UUID) -> NewMemoryKey: ...

    def append(
        self,
        events: Sequence[Recorded],
        new_keys: Sequence[NewMemoryKey] = (),
        destroy_keys: Sequence[UUID] = (),
        *,
        tenant: str,
    ) -> int: ...

    def stream_heads(self, stream_ids: Sequence[UUID]) -> dict[UUID, Recorded]:
        """The latest event of each stream that exists."""
        ...

    def streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[Recorded]]:
        """Every event of each stream, in version order."""
        ...
