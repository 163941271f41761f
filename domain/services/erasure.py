"""Run ``forget``: find, load, decide, sign, and append in ONE transaction the
MemoryErased and KnowledgeErased events, the certificate, the audit record and the
destruction of the erased memories' and knowledge documents' data keys (docs/architecture.md
section 8)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.certificates import DeletionCertificate
from memwarden.domain.model.consolidation import draws_on, evolve_proposal
from memwarden.domain.model.erasure import (
    Derived,
    Forget,
    ForgetDecision,
    ForgetState,
    Head,
    chain_of,
    decide_forget,
    own_writes_only,
    resolve_subtree,
    subject_keys,
    target_kind,
)
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.events import ErasureCertified, KnowledgePublished
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.knowledge import KnowledgeState, current_state, fold_knowledge
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.ports import ErasureLookup
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry
from memwarden.domain.services.memory import utcnow
from memwarden.domain.services.streams import Streams, fold

MAX_ATTEMPTS = 8


class ForgetResult(msgspec.Struct, frozen=True, kw_only=True):
    erased: int
    certificate: DeletionCertificate
    position: int


class ErasureUnavailable(DomainError):
    code = "unavailable"


class ErasureService:
    def __init__(
        self,
        ledger: Ledger,
        streams: Streams,
        members_forget_own: Callable[[str], bool],
        lookup: ErasureLookup | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.ledger = ledger
        self.streams = streams
        self.members_forget_own = members_forget_own
        self.lookup = lookup
        self.clock = clock
        self.new_id = new_id
        # late-bound: a caller may swap the clock or id source after construction
        self.runner = CommandRunner(ledger, streams, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108

    def forget(self, identity: Identity, command: Forget, now: datetime | None = None) -> ForgetResult:
        return self.runner.audited(identity, "forget", lambda: self._forget(identity, command, now))

    def certificate(self, certificate_id: UUID) -> DeletionCertificate | None:
        return self.ledger.certificate(certificate_id)

    # -- the command ----------------------------------------------------------------------

    def _forget(self, identity: Identity, command: Forget, now: datetime | None) -> ForgetResult:
        kind = target_kind(command)
        members_forget_own = self.members_forget_own(identity.namespace)
        own_only = own_writes_only(identity, members_forget_own)  # refuse early, before any lookup
        certificate_id = self.new_id()

        def decide(at: datetime) -> Decided[ForgetResult]:
            position, head_hash = self.ledger.recorder.head()
            state = self._with_derived(self._state(identity, command, kind, position, own_only), position)
            decision = decide_forget(
                command,
                identity,
                state,
                members_forget_own,
                at,
                certificate_id,
                Head(position, head_hash.hex()),
                self.ledger.signing_key.key_id,
            )
            certificate = self.ledger.sign_certificate(decision.certificate)
            versions = {m.id: m.version for m in decision.erased}
            versions.update({d.document_id: d.version for d in decision.erased_documents})
            return Decided(
                result=lambda appended: ForgetResult(
                    erased=certificate.count, certificate=certificate, position=appended
                ),
                events=[*decision.events, *decision.document_events],
                versions=versions,
                note=Note(_detail(decision, kind), subjects=(certificate.id,)),
                fenced=[Recorded(certificate.id, 1, ErasureCertified(certificate=certificate, at=at))],
                destroy_keys=[
                    *(m.id for m in decision.erased),
                    *(d.document_id for d in decision.erased_documents),
                    *decision.shredded_proposals,
                ],
            )

        retry = Retry("the memories kept changing during the erasure; retry", MAX_ATTEMPTS)
        return self.runner.run(identity, "forget", decide, retry, now)

    def _state(
        self, identity: Identity, command: Forget, kind: str, position: int, own_only: bool
    ) -> ForgetState:
        """What the decider needs, from the ledger: the target memories with every version
        their histories list, and the knowledge documents named by id or found in the subtree."""
        lookup = self._lookup()
        if kind == "ids":
            targets = tuple(dict.fromkeys(command.ids or ()))
            others: dict[UUID, list[Recorded]] = {}
            memories = self._load_chains(self.streams.memories(targets, others), position)
            return ForgetState(targets=targets, memories=memories, documents=_documents(others.values()))
        if kind == "subject":
            keys = subject_keys(command.subject or "")
            targets = tuple(lookup.naming_subject(identity.namespace, keys, position))
            memories = self._load_chains(self.streams.memories(targets), position)
            return ForgetState(targets=targets, memories=memories)
        root = resolve_subtree(identity, command.subtree or "")
        targets = tuple(lookup.in_subtree(root, position))
        documents: Mapping[UUID, KnowledgeState] = {}
        if not own_only:  # a member erases its own writes: never a document
            documents = self._current_documents(lookup.documents_in_subtree(root, position))
        memories = self._load_chains(self.streams.memories(targets), position)
        return ForgetState(targets=targets, memories=memories, documents=documents)

    def _with_derived(self, state: ForgetState, position: int) -> ForgetState:
        """``state`` with the proposals drafted from its memories, from the ledger, and the
        documents their approvals published."""
        ids = self._lookup().proposals_drafted_from(list(state.memories), position) if state.memories else []
        proposals = [fold(rs, evolve_proposal) for rs in self.ledger.streams(ids).values()]
        published = self._current_documents([p.document_id for p in proposals if p and p.document_id])
        derived = tuple(
            Derived(
                proposal_id=p.id,
                sources=draws_on(p),
                document=published.get(p.document_id) if p.document_id else None,
            )
            for p in proposals
            if p is not None
        )
        return msgspec.structs.replace(state, derived=derived)

    def _lookup(self) -> ErasureLookup:
        """Every erasure needs the lookup: even one by ids finds the memories rejected in
        review in favour of a version only there (refused, never erased in part)."""
        if self.lookup is None:
            raise ErasureUnavailable("no erasure lookup is configured")
        return self.lookup

    def _current_documents(self, document_ids: list[UUID]) -> dict[UUID, KnowledgeState]:
        """Each document's state from the latest event of its stream alone (every version is
        whole); one already erased (its stream ends with the erasure) is left out."""
        heads = self.ledger.stream_heads(document_ids) if document_ids else {}
        return {
            i: current_state(h.event) for i, h in heads.items() if isinstance(h.event, KnowledgePublished)
        }

    def _load_chains(self, memories: dict[UUID, MemoryState], position: int) -> dict[UUID, MemoryState]:
        """The loaded targets and every version their histories list, from the ledger; the
        lookup names the memories rejected in favour of a version (the decider re-checks
        each against its own ``kept``)."""
        asked: set[UUID] = set()
        for _ in range(10_000):
            found, missing = chain_of(memories, memories)
            if unasked := found - asked:
                asked |= unasked
                missing |= set(self._lookup().rejected_in_favour_of(unasked, position)) - memories.keys()
            if not missing:
                return memories
            loaded = self.streams.memories(missing)
            if not loaded:
                return memories
            memories.update(loaded)
        return memories


def _documents(streams: Iterable[list[Recorded]]) -> dict[UUID, KnowledgeState]:
    """The knowledge documents among ``streams`` (each whole, oldest first), folded; any
    other stream is not a document and is left out."""
    found: dict[UUID, KnowledgeState] = {}
    for events in streams:
        if events and isinstance(events[0].event, KnowledgePublished):
            state = fold_knowledge(r.event for r in events)
            if state is not None:
                found[state.document_id] = state
    return found


def _detail(decision: ForgetDecision, kind: str) -> str:
    documents = len(decision.erased_documents)
    erased = f"{len(decision.erased)} memories" + (f" and {documents} documents" if documents else "")
    return f"erased {erased} by {kind}; certificate {decision.certificate.id}"
