"""Consolidation as a plain service (docs/architecture.md section 6): one namespace's pass under its
lease drafts proposals; reviewers approve (publishing L3 knowledge with ``consolidation``
provenance), edit or reject them, audited.

The actor and the in-process fallback call ``ConsolidationService.consolidate``; it needs
nothing of a broker. From the read side it needs the namespace's memory ids (``Members``),
its fault ids (``Faults``; the faults themselves are read from the ledger) and
near-duplicates (the autopilot's ``Neighbours`` port).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.model.consolidation import (
    CONSOLIDATION,
    DUPLICATE_COSINE,
    NEAR_MISS_COSINE,
    NEIGHBOURS_K,
    Cluster,
    Drafter,
    DraftFailed,
    Links,
    ProposalState,
    Wording,
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
    new_clusters,
    proposal_content,
    proposal_stream,
    ranked,
    worded,
)
from memwarden.domain.model.errors import InvalidState
from memwarden.domain.model.events import ContextFaulted, Event, ProposalDrafted, ProposalTextDrafted
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import Lease
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.ports import Members, Neighbours
from memwarden.domain.services.commands import Decided, Note, Retry
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.services.leases import Leases
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.streams import fold

MAX_MEMBERS = 500
"""A pass looks at a namespace's newest memories, at most this many."""
PROPOSAL_RETRY = Retry("the proposal kept changing; retry")
MAX_FAULTS = 200
"""And at its newest faults, at most this many."""
DRAFTER_BUDGET_SECONDS = 10.0
"""A pass asks the model drafter for this long at most (it holds the namespace's lease
meanwhile); the clusters left then are drafted extractively (``over_budget``)."""


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
        drafter: Drafter | None = None,
        drafter_budget_seconds: float = DRAFTER_BUDGET_SECONDS,
    ) -> None:
        self.drafter = drafter
        self.drafter_budget_seconds = drafter_budget_seconds
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

        wordings: dict[UUID, Wording] = {}  # the model is asked once per cluster, whatever the retries
        keys: dict[UUID, NewMemoryKey] = {}

        def decide(_now: datetime, held: Lease) -> Decided[ConsolidationResult]:
            drafts, clusters = self._drafts(namespace, position, held, wordings)
            worded_ids = [e.proposal_id for e in drafts if isinstance(e, ProposalTextDrafted)]
            for proposal_id in worded_ids:  # a model's statement is sealed with the proposal's own key
                keys.setdefault(proposal_id, self.memory.ledger.new_data_key(proposal_id))
            return Decided(
                result=lambda appended: ConsolidationResult(
                    namespace=namespace,
                    clusters=clusters,
                    drafted=tuple(e.proposal_id for e in drafts if isinstance(e, ProposalDrafted)),
                    position=appended if drafts else None,
                ),
                events=drafts,
                new_keys=[keys[p] for p in worded_ids],
            )

        lease = self.leases.acquire(CONSOLIDATION, namespace, holder)
        contended = "proposals kept being drafted meanwhile; the pass will run again"
        return self.leases.run_fenced(self.memory.runner, lease, decide, contended)

    def _drafts(
        self, namespace: str, position: int, lease: Lease, wordings: dict[UUID, Wording]
    ) -> tuple[list[ProposalDrafted | ProposalTextDrafted], int]:
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
        if self.drafter is not None:
            unworded = [
                x for x in new_clusters(namespace, clusters, states, proposed) if x[0] not in wordings
            ]
            self._word(self.drafter, unworded, wordings)
        drafts = decide_drafts(namespace, clusters, states, proposed, lease.token, now, wordings)
        return drafts, len(clusters)

    def _word(
        self,
        drafter: Drafter,
        clusters: Sequence[tuple[UUID, Cluster, list[MemoryState]]],
        wordings: dict[UUID, Wording],
    ) -> None:
        """Ask the model drafter for each cluster's statement (its members best first, as
        the extractive drafter ranks them), within ``drafter_budget_seconds``; a failure, a
        statement that breaks the rules of caller text, or the budget spent is the
        cluster's ``fallback``."""
        deadline = time.monotonic() + self.drafter_budget_seconds
        for proposal_id, cluster, members in clusters:
            if time.monotonic() > deadline:
                wordings[proposal_id] = Wording(drafter=drafter.name, fallback="over_budget")
                continue
            try:
                text = drafter.draft(cluster.kind, [m.content for m in ranked(members) if m.content])
            except DraftFailed as error:
                wordings[proposal_id] = Wording(drafter=drafter.name, fallback=error.reason)
            else:
                wordings[proposal_id] = worded(drafter.name, text)

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
        return self._reviewed(
            identity,
            proposal_id,
            "edit_proposal",
            lambda s, now: decide_edit(identity, s, content, now),
            sealed=True,
        )

    def reject(self, identity: Identity, proposal_id: UUID) -> ProposalResult:
        return self._reviewed(
            identity, proposal_id, "reject_proposal", lambda s, now: decide_reject(identity, s, now)
        )

    def approve(self, identity: Identity, proposal_id: UUID) -> ProposalResult:
        """Publish the proposal's text as an L3 knowledge version in its namespace (the
        knowledge machinery: governance, sealing, embedding, its own audit record), then
        record the approval. A retry after a failure between the two finds the document
        ``unchanged`` and records the approval."""
        return self.memory.runner.audited(
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
        decide = self._review_decider(
            proposal_id,
            "approve_proposal",
            lambda s, now: decide_approved(identity, _still_pending(identity, s), document_id, version, now),
        )
        return self.memory.runner.run(identity, "approve_proposal", decide, PROPOSAL_RETRY)

    def _reviewed(
        self,
        identity: Identity,
        proposal_id: UUID,
        op: str,
        decide: Callable[[ProposalState | None, datetime], Event],
        *,
        sealed: bool = False,
    ) -> ProposalResult:
        """One review of a proposal, audited. ``sealed``: its event holds text, sealed with
        the proposal's data key (made with the first such event)."""
        return self.memory.runner.command(
            identity, op, self._review_decider(proposal_id, op, decide, sealed=sealed), PROPOSAL_RETRY
        )

    def _review_decider(
        self,
        proposal_id: UUID,
        op: str,
        decide: Callable[[ProposalState | None, datetime], Event],
        *,
        sealed: bool = False,
    ) -> Callable[[datetime], Decided[ProposalResult]]:
        ledger = self.memory.ledger
        new_key = ledger.new_data_key(proposal_id) if sealed else None

        def decided(now: datetime) -> Decided[ProposalResult]:
            state = self.proposal(proposal_id)
            event = decide(state, now)
            assert state is not None
            return Decided(
                result=lambda position: self._result(proposal_id, position),
                events=[event],
                versions={proposal_id: state.version},
                note=Note(op.split("_", maxsplit=1)[0], subjects=(proposal_id,)),
                new_keys=[new_key]
                if new_key is not None and ledger.data_keys.get(proposal_id) is None
                else [],
            )

        return decided

    def _result(self, proposal_id: UUID, position: int) -> ProposalResult:
        after = self.proposal(proposal_id)
        assert after is not None
        return ProposalResult(proposal=after, content=self.content(after), position=position)


def _still_pending(identity: Identity, state: ProposalState | None) -> ProposalState:
    check_approvable(identity, state, "")
    assert state is not None
    return state
