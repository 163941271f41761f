"""Memory and dispute state, folded from their events (``evolve``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

import msgspec
from msgspec.structs import replace

from memwarden.domain.model.classification import Classification
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    DisputeDecision,
    DisputeOpened,
    DisputeResolved,
    Event,
    MemoryErased,
    MemoryReaffirmed,
    MemoryReembedded,
    MemoryReleased,
    MemoryRetired,
    MemoryScope,
    MemoryStatus,
    MemorySuperseded,
    MemoryType,
    MemoryVerified,
    MemoryWritten,
    Provenance,
    TrustTier,
)
from memwarden.domain.model.lifecycle import Lifecycle
from memwarden.domain.model.text import normalize
from memwarden.domain.model.trust import rank_of


class Verification(msgspec.Struct, frozen=True):
    actor: str
    supports: bool
    at: datetime


class MemoryState(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    actor: str
    type: MemoryType
    scope: MemoryScope
    content: str | None
    value: str | None
    subject: str | None
    attribute: str | None
    tags: tuple[str, ...]
    selectors: tuple[str, ...]
    provenance: tuple[Provenance, ...]
    event_time: datetime | None
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    retired_at: datetime | None = None
    status: MemoryStatus
    trust_tier: TrustTier
    supersedes: tuple[UUID, ...] = ()
    superseded_by: tuple[UUID, ...] = ()
    classification: Classification
    verifications: tuple[Verification, ...] = ()
    kept: UUID | None = None
    """Rejected in review (``keep_old``): the memory kept instead, a link of its history."""
    erased_in_quarantine: bool = False
    """Erased while still quarantined: nobody but a reviewer ever saw it, and its
    tombstone stays as hidden as the memory was (denied and missing look the same)."""
    embedding_models: tuple[str, ...] = ()
    """The models the ledger holds a vector of this memory's text by (its write's, then
    each re-embedding's), in the order they came."""
    band_judged: tuple[UUID, ...] = ()
    """The neighbours its write's synchronous band judged it against (``MemoryWritten``)."""
    version: int = 0

    @property
    def hidden(self) -> bool:
        """Invisible to every read: quarantined, or erased while quarantined."""
        return self.status == "disputed" or self.erased_in_quarantine

    @property
    def rank(self) -> int:
        return rank_of(p.source for p in self.provenance)

    @property
    def slot_value(self) -> str:
        """What a slot compares: the structured value, else the normalized content."""
        return normalize(self.value if self.value is not None else self.content or "")

    @property
    def writers(self) -> frozenset[str]:
        return frozenset(p.actor for p in self.provenance)

    def is_current(self, now: datetime) -> bool:
        """Believed now and valid now (docs/architecture.md section 3)."""
        return (
            self.status == "active"
            and self.retired_at is None
            and (self.valid_to is None or self.valid_to > now)
        )


def trust_tier_from(
    verifications: tuple[Verification, ...], base: TrustTier, writers: frozenset[str]
) -> TrustTier:
    """Verified when independent supports outnumber refutations (latest word per actor).

    Only actors that are not among the memory's writers count: a verifier who later
    wrote the same fact (a dedupe joined its provenance) is no longer independent.
    """
    latest: dict[str, bool] = {}
    for verification in verifications:
        if verification.actor not in writers:
            latest[verification.actor] = verification.supports
    supports = sum(latest.values())
    refutes = len(latest) - supports
    if base == "candidate":
        return base
    return "verified" if supports > refutes else "canonical"


def evolve_memory(state: MemoryState | None, event: Event) -> MemoryState:
    if isinstance(event, MemoryWritten):
        return MemoryState(
            id=event.memory_id,
            namespace=event.namespace,
            actor=event.actor,
            type=event.type,
            scope=event.scope,
            content=event.content,
            value=event.value,
            subject=event.subject,
            attribute=event.attribute,
            tags=event.tags,
            selectors=event.selectors,
            provenance=event.provenance,
            event_time=event.event_time,
            recorded_at=event.at,
            valid_from=event.valid_from,
            status=event.status,
            trust_tier=event.trust_tier,
            supersedes=event.supersedes,
            classification=event.classification,
            embedding_models=(event.embedding_model,)
            if event.embedding is not None and event.embedding_model is not None
            else (),
            band_judged=event.band_judged,
            version=1,
        )
    if state is None:
        msg = f"{type(event).__name__} before MemoryWritten"
        raise TypeError(msg)
    version = state.version + 1
    if isinstance(event, MemorySuperseded):
        superseded_by = (*state.superseded_by, event.by)
        if event.kind == "succession":
            return replace(state, valid_to=event.valid_to, superseded_by=superseded_by, version=version)
        return replace(
            state, status="retired", retired_at=event.at, superseded_by=superseded_by, version=version
        )
    if isinstance(event, MemoryReleased):
        return replace(
            state,
            status="active",
            trust_tier="canonical",
            supersedes=(*state.supersedes, *event.supersedes),
            version=version,
        )
    if isinstance(event, MemoryRetired):
        superseded_by = state.superseded_by
        if event.replaced_by is not None:
            superseded_by = (*superseded_by, event.replaced_by)
        return replace(
            state,
            status="retired",
            retired_at=event.at,
            superseded_by=superseded_by,
            kept=event.kept or state.kept,
            version=version,
        )
    if isinstance(event, MemoryReaffirmed):
        provenance = state.provenance
        if event.provenance is not None and event.provenance not in provenance:
            provenance = (*provenance, event.provenance)
        tier = event.trust_tier or state.trust_tier
        return replace(state, provenance=provenance, trust_tier=tier, version=version)
    if isinstance(event, MemoryVerified):
        verification = Verification(actor=event.actor, supports=event.supports, at=event.at)
        return replace(
            state,
            verifications=(*state.verifications, verification),
            trust_tier=event.trust_tier,
            version=version,
        )
    return _evolve_vectors_and_erasure(state, event, version)


def _evolve_vectors_and_erasure(state: MemoryState, event: Event, version: int) -> MemoryState:
    if isinstance(event, MemoryErased):
        return erased_tombstone(state, event.at, version)
    if isinstance(event, MemoryReembedded):
        models = state.embedding_models
        if event.embedding is not None and event.embedding_model not in models:
            models = (*models, event.embedding_model)
        return replace(state, embedding_models=models, version=version)
    msg = f"not a memory event: {type(event).__name__}"
    raise TypeError(msg)


def erased_tombstone(state: MemoryState, at: datetime, version: int) -> MemoryState:
    """What remains of an erased memory: identity, place and times; nothing it said."""
    return replace(
        state,
        status="erased",
        erased_in_quarantine=state.hidden,
        retired_at=state.retired_at or at,
        content=None,
        value=None,
        subject=None,
        attribute=None,
        tags=(),
        selectors=(),
        verifications=(),
        embedding_models=(),
        version=version,
    )


DisputeStatus = Literal["open", "resolved"]


class DisputeState(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_id: UUID
    incumbent_id: UUID
    reason: str
    opened_at: datetime
    status: DisputeStatus = "open"
    decision: DisputeDecision | None = None
    reviewer: str | None = None
    resolved_at: datetime | None = None
    replacement_id: UUID | None = None
    version: int = 0


def _dispute_opened(event: DisputeOpened) -> DisputeState:
    return DisputeState(
        id=event.dispute_id,
        namespace=event.namespace,
        memory_id=event.memory_id,
        incumbent_id=event.incumbent_id,
        reason=event.reason,
        opened_at=event.at,
    )


def _dispute_resolved(state: DisputeState, event: DisputeResolved) -> DisputeState:
    return replace(
        state,
        status="resolved",
        decision=event.decision,
        reviewer=event.reviewer,
        resolved_at=event.at,
        replacement_id=event.replacement_id,
    )


evolve_dispute = Lifecycle("dispute", DisputeOpened, _dispute_opened, DisputeResolved, _dispute_resolved)


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A claim stream's state: its holders (memory ids) and its stream version."""

    id: UUID
    kind: ClaimKind
    namespace: str
    holders: tuple[UUID, ...] = ()
    version: int = 0


def evolve_claim(state: Claim | None, event: Event) -> Claim:
    if not isinstance(event, ClaimSet):
        msg = f"not a claim event: {type(event).__name__}"
        raise TypeError(msg)
    version = 1 if state is None else state.version + 1
    return Claim(
        id=event.claim_id,
        kind=event.kind,
        namespace=event.namespace,
        holders=event.holders,
        version=version,
    )
