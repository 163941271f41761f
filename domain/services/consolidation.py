"""Consolidation as a plain service (DESIGN.md section 6): one namespace's pass under its
lease drafts proposals; reviewers approve (publishing L3 knowledge with ``consolidation``
provenance), edit or reject them, audited.

The actor and the in-process fallback call ``ConsolidationService.consolidate``; it needs
nothing of a broker. From the read side it needs the namespace's memory ids (``Members``),
its fault ids (``Faults``; the faults themselves are read from the ledger) and
near-duplicates (the autopilot's ``Neighbours`` port).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol
from uuid import UUID

import msgspec

from domain.ledger.app import NewMemoryKey, StreamConflict
from domain.ledger.mapper import Recorded
from domain.model.consolidation import (
    CONSOLIDATION,
    DUPLICATE_COSINE,
    NEAR_MISS_COSINE,
    NEIGHBOURS_K,
    Links,
    ProposalState,
    check_approvable,
    decide_approved,
    decide_drafts,
    decide_edit,
    decide_reject,
    evolve_proposal,
    faulted_together,
    find_clusters,
    knowledge_document,
    near_missed,
    proposal_content,
    proposal_stream,
)
from domain.model.errors import InvalidState
from domain.model.events import ContextFaulted, Event, ProposalDrafted
from domain.model.identity import Identity
from domain.model.leases import Lease
from domain.model.memory import MemoryState
from domain.services.autopilot import Neighbours
from domain.services.knowledge import KnowledgeService
from domain.services.leases import Leases
from domain.services.memory import MAX_ATTEMPTS, MemoryService, TooMuchContention
from domain.services.streams import fold

MAX_MEMBERS = 500
"""A pass looks at a namespace's newest memories, at most this many."""
MAX_FAULTS = 200
"""And at its newest faults, at most this many."""


class Members(Protocol):
    """The ids of a namespace's newest memories (``Members``), or of its newest faults
    (``Faults``), once the read models reached ``after``."""

    def __call__(self, namespace: str, limit: int, after: int | None = None) -> list[UUID]: ...


Faults = Members


class ConsolidationResult(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    clusters: int
    drafted: tuple[UUID, ...]
    position: int | None = None


class ProposalResult(msgspec.Struct, frozen=True, kw_only=True):
    proposal: ProposalState
    content: str | None
    position: int


class ConsolidationService:
    def __init__(
        self,
        memory: MemoryService,
        leases: Leases,
        neighbours: Neighbours,
        members: Members,
        knowledge: KnowledgeService,
        faults: Faults,
    ) -> None:
        self.memory = memory
        self.leases = leases
        self.neighbours = neighbours
        self.members = members
        self.knowledge = knowledge
        self.faults = faults

    # -- the pass ----------------------------------------------------------------------------

    def consolidate(self, namespace: str, position: int, holder: str) -> ConsolidationResult:
        """Draft a proposal for every cluster of the namespace not yet proposed, in one
        append fenced by ``holder``'s lease. ``LeaseBusy``: another pass has the namespace;
        ``LeaseLost``: the lease was taken over and nothing was applied."""
        lease = self.leases.acquire(CONSOLIDATION, namespace, holder)
        for _ in range(MAX_ATTEMPTS):
            drafts, clusters = self._drafts(namespace, position, lease)
            recorded = [*(Recorded(d.proposal_id, 1, d) for d in drafts), self.leases.fence(lease)]
            try:
                appended = self.memory.ledger.append(recorded)
            except StreamConflict:
                lease = self.leases.still_held(lease)
                continue
            return ConsolidationResult(
                namespace=namespace,
                clusters=clusters,
                drafted=tuple(d.proposal_id for d in drafts),
                position=appended if drafts else None,
            )
        raise TooMuchContention("proposals kept being drafted meanwhile; the pass will run again")

    def _drafts(self, namespace: str, position: int, lease: Lease) -> tuple[list[ProposalDrafted], int]:
        now = self.memory.clock()
        faults = self._faults(namespace, position)
        missed, together = near_missed(faults), faulted_together(faults)
        wanted = {*self.members(namespace, MAX_MEMBERS, after=position), *missed}
        wanted.update(m for pair in together for m in pair)
        states = self.memory.streams.memories(wanted)
        near_misses = self._similar(
            [states[m] for m in missed if m in states], NEAR_MISS_COSINE, position, now
        )
        states.update(self.memory.streams.memories({n for _, n in near_misses} - set(states)))
        links = Links(
            duplicates=self._similar(list(states.values()), DUPLICATE_COSINE, position, now),
            together=together,
            near_misses=near_misses,
        )
        clusters = find_clusters(namespace, list(states.values()), links, now)
        streams = [proposal_stream(namespace, c) for c in clusters]
        proposed = set(self.memory.ledger.stream_heads(streams))
        drafts = decide_drafts(namespace, clusters, states, proposed, lease.token, now)
        return drafts, len(clusters)

    def _faults(self, namespace: str, position: int) -> list[ContextFaulted]:
        """The namespace's latest faults, as the ledger holds them (their refs and best
        candidates: the read model keeps neither)."""
        ids = self.faults(namespace, MAX_FAULTS, after=position)
        found = self.memory.ledger.streams(ids)
        return [r.event for rs in found.values() for r in rs if isinstance(r.event, ContextFaulted)]

    def _similar(
        self, memories: list[MemoryState], min_cosine: float, position: int, now: datetime
    ) -> tuple[tuple[UUID, UUID], ...]:
        """Each current memory paired with its nearest neighbours at ``min_cosine`` or more."""
        pairs: list[tuple[UUID, UUID]] = []
        for m in memories:
            if m.is_current(now):
                found = self.neighbours.nearest(m.id, NEIGHBOURS_K, min_cosine, position) or []
                pairs.extend((m.id, n) for n, _ in found)
        return tuple(pairs)

    # -- reviewers -----------------------------------------------------------------------------

    def proposal(self, proposal_id: UUID) -> ProposalState | None:
        return fold(self.memory.ledger.streams([proposal_id]).get(proposal_id, []), evolve_proposal)

    def content(self, state: ProposalState) -> str | None:
        canonical = self.memory.streams.memories([state.canonical]).get(state.canonical)
        return proposal_content(state, canonical)

    def edit(self, identity: Identity, proposal_id: UUID, content: str) -> ProposalResult:
        def run() -> ProposalResult:
            key = self.memory.ledger.new_data_key(proposal_id)
            return self._reviewed(
                identity,
                proposal_id,
                "edit_proposal",
                lambda s, now: decide_edit(identity, s, content, now),
                key,
            )

        return self.memory.audit.audited(identity, "edit_proposal", run)

    def reject(self, identity: Identity, proposal_id: UUID) -> ProposalResult:
        return self.memory.audit.audited(
            identity,
            "reject_proposal",
            lambda: self._reviewed(
                identity, proposal_id, "reject_proposal", lambda s, now: decide_reject(identity, s, now)
            ),
        )

    def approve(self, identity: Identity, proposal_id: UUID) -> ProposalResult:
        """Publish the proposal's text as an L3 knowledge version in its namespace (the
        knowledge machinery: governance, sealing, embedding, its own audit record), then
        record the approval. A retry after a failure between the two finds the document
        ``unchanged`` and records the approval."""
        return self.memory.audit.audited(
            identity, "approve_proposal", lambda: self._approve(identity, proposal_id)
        )

    def _approve(self, identity: Identity, proposal_id: UUID) -> ProposalResult:
        state = self.proposal(proposal_id)
        content = check_approvable(identity, state, self.content(state) if state else None)
        assert state is not None
        text, filename = knowledge_document(state, content)
        published = self.knowledge.publish(identity, text, filename, state.namespace)
        if published.outcome == "rejected" or published.document_id is None or published.version is None:
            raise InvalidState(f"the knowledge version was refused: {published.detail}")
        document_id, version = published.document_id, published.version
        return self._reviewed(
            identity,
            proposal_id,
            "approve_proposal",
            lambda s, now: decide_approved(identity, _still_pending(identity, s), document_id, version, now),
        )

    def _reviewed(
        self,
        identity: Identity,
        proposal_id: UUID,
        op: str,
        decide: Callable[[ProposalState | None, datetime], Event],
        new_key: NewMemoryKey | None = None,
    ) -> ProposalResult:
        for _ in range(MAX_ATTEMPTS):
            now = self.memory.clock()
            state = self.proposal(proposal_id)
            event = decide(state, now)
            assert state is not None
            audit = self.memory.audit.event(
                identity, op, "ok", op.split("_", maxsplit=1)[0], now, proposal_id
            )
            keys = (
                [new_key]
                if new_key is not None and self.memory.ledger.data_keys.get(proposal_id) is None
                else []
            )
            try:
                position = self.memory._append([Recorded(proposal_id, state.version + 1, event)], audit, keys)
            except StreamConflict:
                continue
            after = self.proposal(proposal_id)
            assert after is not None
            return ProposalResult(proposal=after, content=self.content(after), position=position)
        raise TooMuchContention("the proposal kept changing; retry")


def _still_pending(identity: Identity, state: ProposalState | None) -> ProposalState:
    check_approvable(identity, state, "")
    assert state is not None
    return state
