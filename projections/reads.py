"""The read side, opened: projections kept up to date, and scoped queries that wait
for the caller's last write (read-your-writes)."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from domain.ledger.app import Ledger
from domain.model.identity import Identity
from domain.model.namespaces import ancestors
from projections.base import Projection
from projections.disputes.projection import DisputesProjection
from projections.disputes.views import DisputeView, list_disputes
from projections.memory_objects.projection import MemoryObjectsProjection
from projections.memory_objects.views import HistoryStep, MemoryView, history, read_memory
from projections.runner import ProjectionRunner


def default_projections() -> list[Projection]:
    return [MemoryObjectsProjection(), DisputesProjection()]


class ReadModels:
    def __init__(
        self,
        ledger: Ledger,
        conninfo: str,
        projections: Sequence[Projection] | None = None,
        wait_seconds: float = 5.0,
    ) -> None:
        self.ledger = ledger
        self.runner = ProjectionRunner(ledger, projections or default_projections(), conninfo)
        self.runner.create_tables()
        self.wait_seconds = wait_seconds

    def wait_for(self, position: int | None) -> None:
        if position:
            self.runner.wait_for(position, self.wait_seconds)

    def scope(self, identity: Identity) -> tuple[str, ...]:
        return ancestors(identity.namespace)

    def read(self, identity: Identity, memory_id: UUID, after: int | None = None) -> MemoryView | None:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return read_memory(conn, self.ledger.schema, self.scope(identity), memory_id)

    def history(
        self, identity: Identity, memory_id: UUID, after: int | None = None
    ) -> list[HistoryStep] | None:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return history(conn, self.ledger.schema, self.scope(identity), memory_id)

    def disputes(
        self, identity: Identity, status: str | None = "open", after: int | None = None
    ) -> list[DisputeView]:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return list_disputes(conn, self.ledger.schema, identity.namespace, status)
