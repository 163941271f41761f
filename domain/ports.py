"""The ports: what the services need from the read side, as Protocols a projection
implements (the composition root, bootstrap/, wires them; docs/architecture.md §2 and §10). A read model is only
ever a hint to a command: what it decides on is loaded from the ledger, except where a
service reads to record what a caller was shown (assemble, fault).

And what the command side needs of the ledger itself (``CommandLedger``, at the end): the
PostgreSQL ledger (``domain.ledger.app.Ledger``) in a deployment, the in-memory one
(``domain.ledger.in_memory``) in unit tests; tests/unit/ledger_contract.py holds both to
the same assertions."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Protocol
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.ledger.audit_spool import AuditSpool
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.ledger.sealing import DataKeys
from memwarden.domain.model.identity import Identity


class Neighbours(Protocol):
    """The read model the autopilot needs: the ``k`` nearest current memories to a memory,
    among those its writer can see (its namespace, the ancestors, shares into it), with
    their cosine similarity, best first; None when the index holds no vector of the memory.
    Waits until the index has reached ``position``."""

    def nearest(
        self, memory_id: UUID, k: int, min_cosine: float, position: int
    ) -> list[tuple[UUID, float]] | None: ...

    def nearest_many(
        self, memory_ids: Sequence[UUID], k: int, min_cosine: float, position: int
    ) -> dict[UUID, list[tuple[UUID, float]]]:
        """``nearest`` for several memories at once (one wait, one lookup of their vectors,
        one read transaction per writer's scope); a memory without a vector is left out."""
        ...

    def positions(self, memory_ids: Sequence[UUID]) -> dict[UUID, int]:
        """The ledger position each memory was written at, for those the index holds: which
        of two memories the ledger holds first, whatever their recorded times say."""
        ...


class Pending(Protocol):
    """A namespace's current memories recorded since a time that no pass has judged for
    good, oldest first, at most ``limit``, with their ledger positions (a read model: only
    a hint, the pass checks the ledger)."""

    def __call__(self, namespace: str, recorded_since: datetime, limit: int) -> list[tuple[UUID, int]]: ...


class Members(Protocol):
    """The ids of a namespace's newest memories (``Members``), or of its newest faults
    (``Faults``), once the read models reached ``after``."""

    def __call__(self, namespace: str, limit: int, after: int | None = None) -> list[UUID]: ...


Faults = Members
"""Consolidation's second read: a namespace's newest faults (the faults themselves are read
from the ledger)."""


class Similar(Protocol):
    """The read model the synchronous band needs: for each of ``vectors``, the ``k`` current
    memories of ``namespace`` (itself only) nearest to it, with their cosine, best first; one
    lookup for all of them."""

    def similar(
        self, namespace: str, vectors: Sequence[bytes], k: int, min_cosine: float, model: str | None = None
    ) -> list[list[tuple[UUID, float]]]:
        """Nothing found when the index serves another model than ``model``, the vectors'."""
        ...


class TreeRoot(Protocol):
    """The Merkle tree's root hash over the first ``size`` ledger records (the tree's read
    model), which a checkpoint signs."""

    def __call__(self, size: int) -> bytes: ...


class ErasureLookup(Protocol):
    """Where the candidates of a subject or subtree erasure are found (a read model that
    has reached ``position``). Only a hint: the decider re-checks the ledger's state."""

    def in_subtree(self, root: str, position: int) -> list[UUID]: ...

    def naming_subject(self, root: str, keys: frozenset[str], position: int) -> list[UUID]: ...

    def documents_in_subtree(self, root: str, position: int) -> list[UUID]:
        """The knowledge documents (ids) whose namespace is ``root`` or below it."""
        ...

    def rejected_in_favour_of(self, memory_ids: Collection[UUID], position: int) -> list[UUID]:
        """The memories a review rejected (``keep_old``) in favour of one of ``memory_ids``:
        the one link of a history that the kept memory's own stream does not name."""
        ...

    def proposals_drafted_from(self, memory_ids: Collection[UUID], position: int) -> list[UUID]:
        """The consolidation proposals (ids) with one of ``memory_ids`` among their sources."""
        ...


# -- working sets (assemble, fault) ------------------------------------------------------------


class MemoryText(msgspec.Struct, frozen=True, kw_only=True):
    """A memory as a working set shows it."""

    id: UUID
    content: str
    recorded_at: datetime


class KnowledgeText(msgspec.Struct, frozen=True, kw_only=True):
    """A chunk of an L3 knowledge document, with its document's title."""

    ref: UUID
    text: str
    title: str | None


Scores = Mapping[UUID, tuple[float, float]]
"""Candidates by ref: (cosine, lexical) scores, as ``domain.model.faults.ranked`` takes them."""


class ScopedReads(Protocol):
    """One caller's scoped view (its namespace, the ancestors, shares into it; nothing
    quarantined or retired) inside one read-only snapshot, for one query text."""

    def pinned(self, namespace: str) -> list[MemoryText]: ...

    def recently_used(self, limit: int) -> list[MemoryText]: ...

    def relevant(self, driver: str | None, k: int) -> list[tuple[MemoryText, float]]:
        """The query's best memories by the named search driver (the baseline when there
        is no such driver), with their scores, best first."""
        ...

    def memory_scores(self, k: int) -> Scores:
        """The best memory candidates of the lexical lane and, with vectors, the vector lane."""
        ...

    def knowledge_scores(self, k: int) -> Scores: ...

    def memories(self, refs: Sequence[UUID]) -> Mapping[UUID, MemoryText]: ...

    def knowledge(self, refs: Sequence[UUID]) -> Mapping[UUID, KnowledgeText]: ...


class WorkingSetReads(Protocol):
    """The read side of ``assemble`` and ``fault``: the search index."""

    def check_query(self, text: str, k: int) -> None:
        """Raises ``InvalidRequest`` for a query text or ``k`` the index refuses."""
        ...

    def wait_for(self, position: int | None) -> None:
        """Waits until the read models have reached ``position`` (None: no wait)."""
        ...

    def position(self) -> int:
        """How far the read models have projected the ledger."""
        ...

    def scoped(
        self, identity: Identity, text: str, k: int, vectors: bool
    ) -> AbstractContextManager[ScopedReads]:
        """The caller's scoped view for ``text``; ``vectors``: with its embedding (may raise
        ``EmbedderUnavailable`` inside the block)."""
        ...


class Lacking(msgspec.Struct, frozen=True):
    """A memory the search index holds text of and no vector of a model."""

    id: UUID
    namespace: str
    position: int


class VectorIndex(Protocol):
    """What the re-embedding pass reads of the search index: which model it serves, and which
    memories lack a vector of a model (a hint: each is decided on its ledger state)."""

    def wait_for(self, position: int | None) -> None: ...

    def serving(self) -> tuple[str, int] | None:
        """The (model, dimensions) the vector lane serves; None before any vector."""
        ...

    def lacking(self, model: str, after: int, limit: int) -> list[Lacking]:
        """Memories with text and no vector of ``model``, written after ``after``, in ledger order."""
        ...

    def count_lacking(self, model: str) -> int: ...


# -- the ledger, as the command side uses it ------------------------------------------------


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
