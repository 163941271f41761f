"""Run a command: load state, decide, append in one transaction, return the position.

Every syscall appends its audit record in the same append as its work; a refused
command appends the audit record alone.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TypeVar
from uuid import UUID

import msgspec

from domain.embedding import Embedder, EmbedderUnavailable, embed_one, vector_to_bytes
from domain.ledger.app import Ledger, NewMemoryKey, StreamConflict
from domain.ledger.entropy import new_uuid
from domain.ledger.mapper import Recorded
from domain.model.classification import Classification
from domain.model.commands import ResolveDispute, VerifyMemory, WriteMemory, WritePolicy
from domain.model.disputes import ResolveState, check_reviewer, decide_resolve
from domain.model.errors import InvalidRequest, InvalidState
from domain.model.events import (
    AuditRecorded,
    ClaimKind,
    Event,
    MemoryWritten,
    TrustTier,
)
from domain.model.identity import Identity
from domain.model.memory import Claim, DisputeState, MemoryState
from domain.model.text import normalize, normalize_key
from domain.model.verification import decide_verify
from domain.model.write import Outcome, Rejection, WriteState, decide_write
from domain.services.audit import Audit, AuditOutcome
from domain.services.streams import Streams

MAX_ATTEMPTS = 12
T = TypeVar("T")
log = logging.getLogger(__name__)
EMBEDDING_UNAVAILABLE = "embedding unavailable"


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    outcome: Outcome
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    position: int
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()


class ResolveResult(msgspec.Struct, frozen=True, kw_only=True):
    dispute: DisputeState
    position: int


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    trust_tier: TrustTier
    position: int


class TooMuchContention(InvalidState):
    """The streams kept moving under this command; the caller may simply retry."""


C = TypeVar("C", WriteMemory, ResolveDispute, VerifyMemory)


def validated(command: C) -> C:
    """Check a command's field types: a Struct built in Python is not validated, and a
    wrongly typed value must never reach the ledger (it could not be decoded again)."""
    try:
        return msgspec.convert(msgspec.to_builtins(command), type(command))
    except (msgspec.ValidationError, TypeError) as error:
        raise InvalidRequest(f"invalid {type(command).__name__}: {error}") from error


def utcnow() -> datetime:
    return datetime.now(UTC)


class ClaimIds:
    """Claim stream ids: keyed HMACs, so an id reveals nothing of the text it stands for."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _id(self, *parts: str) -> UUID:
        # surrogatepass: a lone surrogate still gets an id; the decider then rejects the write
        joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, joined, hashlib.sha256).digest()
        return UUID(bytes=digest[:16], version=4)

    def text(self, namespace: str, content: str) -> UUID:
        return self._id("text", namespace, normalize(content))

    def slot(self, namespace: str, subject: str, attribute: str) -> UUID:
        return self._id("slot", namespace, normalize_key(subject), normalize_key(attribute))

    def source_ref(self, namespace: str, source: str, ref: str) -> UUID:
        return self._id("source_ref", namespace, source, normalize_key(ref))


def version_events(events: Iterable[Event], versions: dict[UUID, int]) -> list[Recorded]:
    """Give each event the next version of its stream (new streams start at 1)."""
    next_version = dict(versions)
    recorded = []
    for event in events:
        stream = event.stream_id
        version = next_version.get(stream, 0) + 1
        next_version[stream] = version
        recorded.append(Recorded(stream, version, event))
    return recorded


class MemoryService:
    def __init__(
        self,
        ledger: Ledger,
        claim_ids: ClaimIds,
        policy_for: Callable[[str], WritePolicy] | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
        embedder: Embedder | None = None,
    ) -> None:
        self.ledger = ledger
        self.embedder = embedder
        self.streams = Streams(ledger)
        self.claim_ids = claim_ids
        self.policy_for = policy_for or (lambda _namespace: WritePolicy())
        self.clock = clock
        self.new_id = new_id
        # late-bound: a caller may swap the clock or id source after construction
        self.audit = Audit(ledger, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108

    # -- write ----------------------------------------------------------------------------

    def write(self, identity: Identity, command: WriteMemory, now: datetime | None = None) -> WriteResult:
        return self._audited(
            identity, "write", lambda: self._write(identity, validated(command), now or self.clock())
        )

    def _write(self, identity: Identity, command: WriteMemory, now: datetime) -> WriteResult:
        memory_id, dispute_id = self.new_id(), self.new_id()
        policy = self.policy_for(identity.namespace)
        wanted = self._write_claims(identity.namespace, command)
        text_claim_id = wanted[0][0]
        assume_absent = frozenset({text_claim_id})
        new_key: NewMemoryKey | None = None
        vectors: dict[str, bytes | None] = {}  # embedded once, whatever the retries
        for _ in range(MAX_ATTEMPTS):
            claims = self.streams.claims(wanted, assume_absent)
            holders = self.streams.memories(h for c in claims.values() for h in c.holders)
            slot = next((claims[c] for c, kind, _ in wanted if kind == "slot"), None)
            ref = next((claims[c] for c, kind, _ in wanted if kind == "source_ref"), None)
            state = WriteState(
                text_claim=claims[text_claim_id], slot_claim=slot, source_ref_claim=ref, holders=holders
            )
            decision = decide_write(command, identity, state, policy, now, memory_id, dispute_id)
            outcome: AuditOutcome = "denied" if decision.outcome == "rejected" else "ok"
            detail: str = decision.outcome
            if decision.rejected:
                detail += ": " + ", ".join(r.reason for r in decision.rejected)
            writes_memory = any(isinstance(e, MemoryWritten) for e in decision.events)
            if writes_memory and new_key is None:
                new_key = self.ledger.new_data_key(memory_id)
            events = self._embedded(decision.events, vectors)
            if None in vectors.values():
                detail += "; " + EMBEDDING_UNAVAILABLE
            versions = _versions(claims.values(), holders.values())
            recorded = version_events(events, versions)
            audit = self.audit.event(identity, "write", outcome, detail, now, decision.memory_id)
            try:
                position = self._append(recorded, audit, [new_key] if writes_memory and new_key else [])
            except StreamConflict:
                self.streams.cache.drop(r.originator_id for r in recorded)
                assume_absent = frozenset()
                continue
            return WriteResult(
                outcome=decision.outcome,
                id=decision.memory_id,
                supersedes=decision.supersedes,
                dispute_id=decision.dispute_id,
                position=position,
                classification=decision.classification,
                rejected=decision.rejected,
            )
        raise TooMuchContention("the memory's claims kept changing; retry the write")

    def _write_claims(self, namespace: str, command: WriteMemory) -> list[tuple[UUID, ClaimKind, str]]:
        wanted: list[tuple[UUID, ClaimKind, str]] = [
            (self.claim_ids.text(namespace, command.content), "text", namespace)
        ]
        if command.subject is not None and command.attribute is not None:
            wanted.append(
                (self.claim_ids.slot(namespace, command.subject, command.attribute), "slot", namespace)
            )
        if command.provenance.ref is not None:
            ref_id = self.claim_ids.source_ref(namespace, command.provenance.source, command.provenance.ref)
            wanted.append((ref_id, "source_ref", namespace))
        return wanted

    # -- disputes ---------------------------------------------------------------------------

    def resolve_dispute(
        self, identity: Identity, command: ResolveDispute, now: datetime | None = None
    ) -> ResolveResult:
        return self._audited(
            identity,
            "resolve_dispute",
            lambda: self._resolve(identity, validated(command), now or self.clock()),
        )

    def _resolve(self, identity: Identity, command: ResolveDispute, now: datetime) -> ResolveResult:
        replacement_id = self.new_id()
        new_key: NewMemoryKey | None = None
        vectors: dict[str, bytes | None] = {}
        for _ in range(MAX_ATTEMPTS):
            dispute = check_reviewer(
                identity, self.streams.disputes([command.dispute_id]).get(command.dispute_id)
            )
            memories = self.streams.memories([dispute.memory_id, dispute.incumbent_id])
            new = memories.get(dispute.memory_id)
            claims = self._resolve_claims(dispute, new, command)
            holders = self.streams.memories(h for c in claims.values() if c.kind == "slot" for h in c.holders)
            memories = {**holders, **memories}
            state = ResolveState(
                dispute=dispute,
                new=new,
                incumbent=memories.get(dispute.incumbent_id),
                slot_claim=next((c for c in claims.values() if c.kind == "slot"), None),
                text_claim=next((c for c in claims.values() if c.kind == "text"), None),
                holders=holders,
            )
            events = decide_resolve(
                command, identity, state, self.policy_for(dispute.namespace), now, replacement_id
            )
            if command.decision == "edit" and new_key is None:
                new_key = self.ledger.new_data_key(replacement_id)
            versions = _versions(claims.values(), memories.values(), [dispute])
            recorded = version_events(self._embedded(events, vectors), versions)
            audit = self.audit.event(identity, "resolve_dispute", "ok", command.decision, now, dispute.id)
            try:
                position = self._append(recorded, audit, [new_key] if new_key else [])
            except StreamConflict:
                self.streams.cache.drop(r.originator_id for r in recorded)
                continue
            resolved = self.streams.disputes([dispute.id])[dispute.id]
            return ResolveResult(dispute=resolved, position=position)
        raise TooMuchContention("the dispute's memories kept changing; retry")

    def _resolve_claims(
        self, dispute: DisputeState, new: MemoryState | None, command: ResolveDispute
    ) -> dict[UUID, Claim]:
        if new is None or command.decision == "keep_old":
            return {}
        content = command.content if command.decision == "edit" else new.content
        wanted: list[tuple[UUID, ClaimKind, str]] = []
        if content is not None:
            wanted.append((self.claim_ids.text(dispute.namespace, content), "text", dispute.namespace))
        if new.subject is not None and new.attribute is not None:
            slot_id = self.claim_ids.slot(dispute.namespace, new.subject, new.attribute)
            wanted.append((slot_id, "slot", dispute.namespace))
        return self.streams.claims(wanted)

    # -- verification -----------------------------------------------------------------------

    def verify(self, identity: Identity, command: VerifyMemory, now: datetime | None = None) -> VerifyResult:
        return self._audited(
            identity, "verify", lambda: self._verify(identity, validated(command), now or self.clock())
        )

    def _verify(self, identity: Identity, command: VerifyMemory, now: datetime) -> VerifyResult:
        for _ in range(MAX_ATTEMPTS):
            memory = self.streams.memories([command.memory_id]).get(command.memory_id)
            event = decide_verify(command, identity, memory, now)
            assert memory is not None
            recorded = version_events([event], {memory.id: memory.version})
            detail = "supports" if command.supports else "refutes"
            audit = self.audit.event(identity, "verify", "ok", detail, now, memory.id)
            try:
                position = self._append(recorded, audit, [])
            except StreamConflict:
                self.streams.cache.drop([memory.id])
                continue
            return VerifyResult(id=memory.id, trust_tier=event.trust_tier, position=position)
        raise TooMuchContention("the memory kept changing; retry the verification")

    # -- reading authoritative state ---------------------------------------------------------

    def memory(self, memory_id: UUID) -> MemoryState | None:
        return self.streams.memories([memory_id]).get(memory_id)

    def dispute(self, dispute_id: UUID) -> DisputeState | None:
        return self.streams.disputes([dispute_id]).get(dispute_id)

    # -- plumbing -----------------------------------------------------------------------------

    def _embedded(self, events: Sequence[Event], vectors: dict[str, bytes | None]) -> list[Event]:
        """New memories get their embedding, computed once here and sealed in the event,
        so a replay never re-embeds. An embedder failure stores the memory without one
        (``vectors`` then holds None, and the audit says so): a write is never lost to it."""
        embedder = self.embedder
        if embedder is None:
            return list(events)
        out: list[Event] = []
        for event in events:
            vector = None
            if isinstance(event, MemoryWritten) and event.content is not None:
                if event.content not in vectors:
                    vectors[event.content] = self._embed(embedder, event.content)
                vector = vectors[event.content]
            if vector is not None:
                out.append(
                    msgspec.structs.replace(event, embedding=vector, embedding_model=embedder.model_id)
                )
            else:
                out.append(event)
        return out

    @staticmethod
    def _embed(embedder: Embedder, text: str) -> bytes | None:
        try:
            return vector_to_bytes(embed_one(embedder, text))
        except EmbedderUnavailable as error:
            log.warning("embedder unavailable, memory stored without a vector: %s", error)
            return None

    def _append(
        self, recorded: Sequence[Recorded], audit: AuditRecorded, keys: Sequence[NewMemoryKey]
    ) -> int:
        position = self.ledger.append([*recorded, Recorded(audit.record_id, 1, audit)], keys)
        self.streams.remember(recorded)
        return position

    def record_audit(
        self, identity: Identity, op: str, outcome: AuditOutcome, detail: str, subject_id: UUID | None = None
    ) -> int:
        """Append an audit record on its own (a denial, a miss, a read)."""
        return self.audit.record(identity, op, outcome, detail, subject_id)

    def _audited(self, identity: Identity, op: str, run: Callable[[], T]) -> T:
        return self.audit.audited(identity, op, run)


def _versions(*groups: Iterable[Claim | MemoryState | DisputeState]) -> dict[UUID, int]:
    return {state.id: state.version for group in groups for state in group}
