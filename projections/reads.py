"""The read side, opened: projections kept up to date, and scoped queries that wait
for the caller's last write (read-your-writes)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.embedding import Embedder, EmbedderUnavailable
from memwarden.domain.ledger import locks
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.identity import COMPLIANCE_ROLES, REVIEWER_ROLES, Identity
from memwarden.domain.model.namespaces import ancestors
from memwarden.projections.autopilot.projection import AutopilotProjection
from memwarden.projections.autopilot.views import (
    DECISIONS,
    FINDINGS,
    PROPOSALS,
    AutopilotCounts,
    DecisionView,
    FindingView,
    ProposalView,
    WorkerGauges,
    autopilot_counts,
    namespace_faults,
    namespace_memories,
    pending_memories,
    unjudged_memories,
    worker_gauges,
)
from memwarden.projections.base import DeferredIndexes, Projection
from memwarden.projections.disputes.projection import DisputesProjection
from memwarden.projections.disputes.views import DISPUTES, DisputeView
from memwarden.projections.governance.projection import AuditProjection, KeysProjection, SharesProjection
from memwarden.projections.governance.views import (
    AuditFilter,
    AuditView,
    KeyView,
    ScopeCounts,
    list_audit,
    list_keys,
    scope_counts,
    shared_into,
)
from memwarden.projections.listing import Listed, ListedTable, ListQuery, page
from memwarden.projections.memory_objects.projection import MemoryObjectsProjection
from memwarden.projections.memory_objects.views import (
    HistoryScope,
    HistoryStep,
    MemoryView,
    history,
    read_memory,
    statements,
)
from memwarden.projections.merkle.projection import MerkleProjection
from memwarden.projections.merkle.reads import TreeReads
from memwarden.projections.runner import ProjectionRunner
from memwarden.projections.search.drivers import Driver
from memwarden.projections.search.projection import SearchIndexProjection
from memwarden.projections.search.service import SearchService
from memwarden.projections.search.telemetry import AccessProjection
from memwarden.projections.timeline.projection import TimelineProjection
from memwarden.projections.timeline.service import TimeTravel

log = logging.getLogger(__name__)


def vector_model_of(embedder: Embedder | None) -> tuple[str, int] | None:
    """(model id, dimensions) of the embedder whose HNSW index the search index keeps. An
    endpoint that cannot say its dimensions now gets none: search stays lexical until a restart."""
    if embedder is None:
        return None
    try:
        return embedder.model_id, embedder.dimensions
    except EmbedderUnavailable:
        log.warning("the embedder did not answer at start-up; no vector index this run")
        return None


def default_projections(embedder: Embedder | None = None) -> list[Projection]:
    vector_model = vector_model_of(embedder)
    return [
        MemoryObjectsProjection(),
        DisputesProjection(),
        KeysProjection(),
        AuditProjection(),
        SharesProjection(),
        TimelineProjection(),
        SearchIndexProjection(vector_model),
        AccessProjection(),
        AutopilotProjection(),
        MerkleProjection(),
    ]


V = TypeVar("V", bound=msgspec.Struct)
OPEN = ListQuery(status="open")
PENDING_REVIEW = ListQuery(status="pending_review")
ANY_STATUS = ListQuery()


class ReadModels:
    def __init__(
        self,
        ledger: Ledger,
        conninfo: str,
        projections: Sequence[Projection] | None = None,
        wait_seconds: float = 5.0,
        embedder: Embedder | None = None,
        drivers: dict[str, Driver] | None = None,
    ) -> None:
        self.ledger = ledger
        self.runner = ProjectionRunner(ledger, projections or default_projections(embedder), conninfo)
        self.wait_seconds = wait_seconds
        self.time_travel = TimeTravel(ledger, self.wait_for)
        self.search = SearchService(ledger, embedder, self.wait_for, drivers=drivers)
        self.tree = TreeReads(
            ledger.datastore,
            ledger.schema,
            self.wait_for,
            ledger.head_position,
            lambda: self.runner.reached_hint,
        )

    def build_missing_indexes(self) -> None:
        """Build the indexes this configuration needs and the database lacks: the configured
        embedder's HNSW graph, which no migration can know (its model and dimensions are
        settings). Start-up calls it; a no-op when the index is there."""
        deferring = [p for p in self.runner.projections if isinstance(p, DeferredIndexes)]
        if not deferring:
            return
        with self.ledger.datastore.transaction(commit=True) as curs:
            locks.hold(curs, locks.SCHEMA)
            for projection in deferring:
                projection.build_indexes(curs, self.ledger.schema)

    def wait_for(self, position: int | None) -> None:
        """Read-your-writes: no query at all when this process saw the models pass ``position``."""
        if not position or position <= self.runner.reached_hint:
            return
        if not self.runner.reached(position):
            self.runner.wait_for(position, self.wait_seconds)

    def scope(self, identity: Identity) -> tuple[str, ...]:
        return ancestors(identity.namespace)

    def read(self, identity: Identity, memory_id: UUID, after: int | None = None) -> MemoryView | None:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            scope = self.scope(identity)
            found = read_memory(conn, self.ledger.schema, scope, memory_id)
            if found is not None:
                return found
            shared = shared_into(conn, self.ledger.schema, scope, [memory_id])
            return read_memory(conn, self.ledger.schema, scope, memory_id, shared) if shared else None

    def history(
        self, identity: Identity, memory_id: UUID, after: int | None = None
    ) -> list[HistoryStep] | None:
        """A chain the caller may see: what ``read`` shows it, and for compliance staff the
        chains of their subtree (docs/architecture.md §7), quarantined versions for its reviewers."""
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            scope = self.scope(identity)
            seen = HistoryScope(
                scope=scope,
                shared=tuple(shared_into(conn, self.ledger.schema, scope, [memory_id])),
                subtree=identity.namespace if identity.role in COMPLIANCE_ROLES else None,
                quarantined=identity.role in REVIEWER_ROLES,
            )
            return history(conn, self.ledger.schema, seen, memory_id)

    def disputes(
        self, identity: Identity, query: ListQuery = OPEN, after: int | None = None
    ) -> Listed[DisputeView]:
        return self._queue(
            DISPUTES, identity, query, after, DisputeView, lambda d: [d.memory_id, d.incumbent_id]
        )

    def findings(
        self, identity: Identity, query: ListQuery = OPEN, after: int | None = None
    ) -> Listed[FindingView]:
        return self._queue(FINDINGS, identity, query, after, FindingView, lambda f: [f.memory_a, f.memory_b])

    def decisions(
        self, identity: Identity, query: ListQuery = ANY_STATUS, after: int | None = None
    ) -> Listed[DecisionView]:
        return self._queue(DECISIONS, identity, query, after, DecisionView, lambda d: [d.winner, d.loser])

    def proposals(
        self, identity: Identity, query: ListQuery = PENDING_REVIEW, after: int | None = None
    ) -> Listed[ProposalView]:
        return self._queue(
            PROPOSALS, identity, query, after, ProposalView, lambda p: [*p.sources, p.canonical]
        )

    def _queue(
        self,
        table: ListedTable,
        identity: Identity,
        query: ListQuery,
        after: int | None,
        shape: type[V],
        about: Callable[[V], list[UUID]],
    ) -> Listed[V]:
        """A page of a reviewer's queue and, beside it, the statements its rows are about
        that the reviewer may see (the subtree and its ancestors), read in one connection."""
        self.wait_for(after)
        root = identity.namespace
        with self.ledger.datastore.get_connection() as conn:
            found = page(
                conn, self.ledger.schema, table, root, query, lambda row: msgspec.convert(row, shape)
            )
            ids = list(dict.fromkeys(memory for item in found.items for memory in about(item)))
            seen = statements(conn, self.ledger.schema, ids, root, ancestors(root))
        return replace(found, statements=seen)

    def namespace_memories(self, namespace: str, limit: int, after: int | None = None) -> list[UUID]:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return namespace_memories(conn, self.ledger.schema, namespace, limit)

    def namespace_faults(self, namespace: str, limit: int, after: int | None = None) -> list[UUID]:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return namespace_faults(conn, self.ledger.schema, namespace, limit)

    def autopilot_counts(self, identity: Identity, after: int | None = None) -> AutopilotCounts:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return autopilot_counts(conn, self.ledger.schema, self.scope(identity), identity.namespace)

    def unjudged_memories(self, recorded_before: datetime, limit: int = 500) -> list[tuple[UUID, int]]:
        with self.ledger.datastore.get_connection() as conn:
            return unjudged_memories(conn, self.ledger.schema, recorded_before, limit)

    def pending_memories(
        self, namespace: str, recorded_since: datetime, limit: int
    ) -> list[tuple[UUID, int]]:
        with self.ledger.datastore.get_connection() as conn:
            return pending_memories(conn, self.ledger.schema, namespace, recorded_since, limit)

    def worker_gauges(self) -> WorkerGauges:
        with self.ledger.datastore.get_connection() as conn:
            return worker_gauges(conn, self.ledger.schema)

    def counts(self, identity: Identity, after: int | None = None) -> ScopeCounts:
        self.wait_for(after)
        with self.ledger.datastore.get_connection() as conn:
            return scope_counts(conn, self.ledger.schema, self.scope(identity), identity.namespace)

    def keys(self, root: str, query: ListQuery = ANY_STATUS) -> Listed[KeyView]:
        with self.ledger.datastore.get_connection() as conn:
            return list_keys(conn, self.ledger.schema, root, query)

    def audit(self, root: str, where: AuditFilter) -> list[AuditView]:
        """Audit records of ``root``'s subtree; waits for the ledger head so nothing is missed."""
        self.wait_for(self.ledger.head_position())
        with self.ledger.datastore.get_connection() as conn:
            return list_audit(conn, self.ledger.schema, root, where)
