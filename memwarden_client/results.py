"""What the API answers, as msgspec structs. Fields the server adds later are ignored, so
an older client keeps working against a newer server."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID

import msgspec

I = TypeVar("I")  # noqa: E741 - the item of a page


class Result(msgspec.Struct, frozen=True, kw_only=True):
    pass


class Page(Result, Generic[I], frozen=True, kw_only=True):
    """One page of a list (API.md "Lists"): its items and the cursor of the next page (None:
    the last one)."""

    items: list[I]
    cursor: str | None = None
    count: int | None = None
    """Items matching the filters in all, where the list counts them (the review queues, keys)."""
    statements: dict[UUID, Statement] = msgspec.field(default_factory=dict)
    """A review queue's: the memories its items name, as the caller may see them."""


class Statement(Result, frozen=True, kw_only=True):
    """A memory beside a review item: what it says, who wrote it, on what authority, when."""

    id: UUID
    namespace: str
    content: str | None
    actor: str
    trust_tier: str
    provenance: list[Provenance]
    recorded_at: datetime
    status: str


class Classification(Result, frozen=True, kw_only=True):
    sensitivity: str = "internal"
    pii: tuple[str, ...] = ()
    secrets: tuple[str, ...] = ()


class Rejection(Result, frozen=True, kw_only=True):
    reason: str
    detail: str


class ProvenanceCapped(Result, frozen=True, kw_only=True):
    """A provenance claim above the key's cap, and the source the memory carries instead."""

    claimed: str
    applied: str


class WriteResult(Result, frozen=True, kw_only=True):
    outcome: Literal["stored", "deduplicated", "superseded", "disputed", "rejected"]
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    position: int = 0
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    extracted: bool = False
    verbatim_reason: str | None = None
    provenance_capped: ProvenanceCapped | None = None
    findings: tuple[UUID, ...] = ()
    """Findings the write opened (its band judged a contradiction the dial leaves to a person)."""
    decisions: tuple[UUID, ...] = ()
    """Automatic settlements the write made, each overturnable (``OverturnDecision``)."""


class Ticket(Result, frozen=True, kw_only=True):
    ticket: UUID


class WriteBatchResult(Result, frozen=True, kw_only=True):
    results: list[WriteResult]


class TicketStatus(Result, frozen=True, kw_only=True):
    state: Literal["pending", "running", "done", "failed"]
    result: dict[str, Any] | None = None


class Provenance(Result, frozen=True, kw_only=True):
    source: str
    actor: str
    ref: str | None = None
    content_hash: str | None = None


class Verification(Result, frozen=True, kw_only=True):
    actor: str
    supports: bool
    at: datetime


class Memory(Result, frozen=True, kw_only=True):
    """A memory as ``read`` answers it (docs/architecture.md section 3); ``content`` is None once erased.
    A read with ``as_of``/``valid_at`` answers the same fields as they stood then, and the
    instants: ``as_of``, ``valid_at`` (None unless asked) and the ledger ``position``."""

    id: UUID
    namespace: str
    content: str | None
    status: str
    trust_tier: str
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    retired_at: datetime | None = None
    scope: str | None = None
    type: str | None = None
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    tags: list[str] = []
    selectors: list[str] = []
    provenance: list[Provenance] = []
    event_time: datetime | None = None
    supersedes: list[UUID] = []
    superseded_by: list[UUID] = []
    classification: Classification | None = None
    verifications: list[Verification] = []
    as_of: datetime | None = None
    valid_at: datetime | None = None
    position: int | None = None


class SearchHit(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    content: str | None
    score: float
    type: str
    status: str
    trust_tier: str
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    provenance: list[Provenance] = []


class SearchResults(Result, frozen=True, kw_only=True):
    results: list[SearchHit]
    driver: str
    degraded: bool = False


class Block(Result, frozen=True, kw_only=True):
    ref: str
    kind: str
    lane: str
    content: str
    token_estimate: int
    score: float


class Admission(Result, frozen=True, kw_only=True):
    ref: str
    lane: str
    score: float
    threshold: float
    admitted: bool
    reason: str


class Receipt(Result, frozen=True, kw_only=True):
    capsule_id: UUID
    merkle_root: str
    position: int
    namespace: str
    actor: str
    issued_at: datetime
    key_id: str
    signature: str = ""


class Capsule(Result, frozen=True, kw_only=True):
    blocks: list[Block]
    admission: list[Admission]
    receipt: Receipt


class FaultBlock(Result, frozen=True, kw_only=True):
    ref: UUID
    kind: str
    content: str
    score: float
    title: str | None = None


class FaultAnswer(Result, frozen=True, kw_only=True):
    hit: bool
    source: str | None
    blocks: list[FaultBlock]
    latency_ms: float
    score: float = 0.0
    degraded: bool = False
    position: int = 0


class Version(Result, frozen=True, kw_only=True):
    id: UUID
    content: str | None
    status: str
    trust_tier: str
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    retired_at: datetime | None = None
    superseded_by: UUID | None = None
    kind: str | None = None
    reason: str | None = None
    at: datetime | None = None


class History(Result, frozen=True, kw_only=True):
    versions: list[Version]


class Verified(Result, frozen=True, kw_only=True):
    id: UUID
    trust_tier: str
    position: int = 0


class Pinned(Result, frozen=True, kw_only=True):
    pinned: bool


class Stats(Result, frozen=True, kw_only=True):
    namespace: str
    current: int
    disputed: int
    retired: int
    erased: int
    shared_in: int = 0
    pinned: int = 0
    open_disputes: int = 0
    open_findings: int | None = None
    open_proposals: int | None = None
    unjudged: int | None = None
    fault_hit_rate: float | None = None
    projection_lag: int = 0


class Directive(Result, frozen=True, kw_only=True):
    id: str
    text: str
    namespace: str | None = None
    acknowledged: bool | None = None


class Policy(Result, frozen=True, kw_only=True):
    namespace: str
    conflict_review: str
    forbid_secrets: bool
    rate_limit_per_minute: int
    driver: str | None
    suspended: bool
    directives: list[Directive]


class Acknowledged(Result, frozen=True, kw_only=True):
    acknowledged: bool


class Shared(Result, frozen=True, kw_only=True):
    share_id: UUID


class Certificate(Result, frozen=True, kw_only=True):
    """A signed deletion certificate (``requests.VerifyCertificate`` checks one)."""

    id: UUID
    kind: str
    erased_ids: tuple[UUID, ...]
    count: int
    scope: str
    target_kind: str
    ledger_position: int
    ledger_hash: str
    time: datetime
    requester: str
    requester_namespace: str
    requester_role: str
    reason: str
    key_id: str
    signature: str = ""
    erased_documents: tuple[UUID, ...] = ()
    target: str | None = None


class Forgotten(Result, frozen=True, kw_only=True):
    erased: int
    certificate: Certificate
    position: int = 0


class NewKey(Result, frozen=True, kw_only=True):
    key_id: str
    key: str


class Revoked(Result, frozen=True, kw_only=True):
    revoked: bool


class KeyInfo(Result, frozen=True, kw_only=True):
    key_id: str
    namespace: str
    actor: str
    role: str
    issued_by: str
    issued_at: datetime
    revoked: bool
    revoked_at: datetime | None = None
    max_provenance: str | None = None


class OwnPolicy(Result, frozen=True, kw_only=True):
    namespace: str
    version: int
    conflict_review: str | None = None
    forbid_secrets: bool | None = None
    rate_limit_per_minute: int | None = None
    directives: list[Directive] = []
    driver: str | None = None
    suspended: bool | None = None
    effective: Policy


class Dispute(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_id: UUID
    incumbent_id: UUID
    reason: str
    status: str
    decision: str | None = None
    reviewer: str | None = None
    resolution_reason: str | None = None
    replacement_id: UUID | None = None
    opened_at: datetime
    resolved_at: datetime | None = None


class DisputeState(Result, frozen=True, kw_only=True):
    """A dispute after a decision (``resolve_dispute``)."""

    id: UUID
    namespace: str
    memory_id: UUID
    incumbent_id: UUID
    reason: str
    status: str = "open"
    decision: str | None = None
    reviewer: str | None = None
    replacement_id: UUID | None = None
    opened_at: datetime
    resolved_at: datetime | None = None


class AsOfMemory(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    content: str | None
    status: str
    trust_tier: str
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None = None
    retired_at: datetime | None = None


class AsOfPage(Result, frozen=True, kw_only=True):
    memories: list[AsOfMemory]
    position: int
    next_cursor: str | None
    as_of: datetime | None = None
    valid_at: datetime | None = None


class AuditRecord(Result, frozen=True, kw_only=True):
    position: int
    time: datetime
    actor: str
    namespace: str
    role: str = ""
    op: str
    outcome: str
    detail: str
    subject_ids: list[UUID] = []


class Head(Result, frozen=True, kw_only=True):
    position: int
    hash: str


class LedgerCheck(Result, frozen=True, kw_only=True):
    ok: bool
    checked: int
    head: Head
    first_bad_position: int | None = None
    problem: str | None = None


class Checkpoint(Result, frozen=True, kw_only=True):
    position: int
    hash: str
    time: datetime
    key_id: str
    signature: str


class Inclusion(Result, frozen=True, kw_only=True):
    """An RFC 6962 inclusion proof of ledger ``position`` (leaf ``leaf_index``) in the tree
    of ``size`` (hashes in base64; check with ``memwarden_client.proofs``)."""

    position: int
    leaf_index: int
    size: int
    leaf_hash: str
    root: str
    proof: list[str]


class Consistency(Result, frozen=True, kw_only=True):
    """An RFC 6962 consistency proof between tree sizes ``first`` and ``second``."""

    first: int
    second: int
    first_root: str
    second_root: str
    proof: list[str]


class Cosigned(Result, frozen=True, kw_only=True):
    size: int
    witness: str
    note: str


class Proof(Result, frozen=True, kw_only=True):
    """``prove``: the inclusion proof, the signed checkpoint note and the log's verifier key."""

    inclusion: Inclusion
    checkpoint: str
    log_key: str


class CertificateCheck(Result, frozen=True, kw_only=True):
    valid: bool
    problem: str | None = None


class ProjectionStatus(Result, frozen=True, kw_only=True):
    name: str
    position: int
    lag: int
    error: str | None = None
    stopped_at: int | None = None


class Projections(Result, frozen=True, kw_only=True):
    head: int
    projections: list[ProjectionStatus]


class Rebuilt(Result, frozen=True, kw_only=True):
    name: str
    position: int
    events: int
    seconds: float
    events_per_second: float
    switched: bool
    verified: bool = False
    differences: list[str] = []


class Finding(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_a: UUID
    memory_b: UUID
    judge: str
    rule: str
    explanation: str
    cosine: float
    group_id: UUID | None = None
    """The newer statement's id, shared by the findings about it (None from older servers)."""
    status: str
    decision: str | None = None
    reviewer: str | None = None
    resolution_reason: str | None = None
    opened_at: datetime
    resolved_at: datetime | None = None


class FindingState(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_a: UUID
    memory_b: UUID
    group_id: UUID | None = None
    status: str
    decision: str | None = None
    reviewer: str | None = None
    resolved_at: datetime | None = None


class Decision(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    winner: UUID
    loser: UUID
    judge: str
    rule: str
    explanation: str
    dial: str
    status: str
    reviewer: str | None = None
    overturn_reason: str | None = None
    restored: UUID | None = None
    settled_at: datetime
    overturned_at: datetime | None = None


class DecisionState(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    winner: UUID
    loser: UUID
    status: str
    reviewer: str | None = None
    restored: UUID | None = None
    overturned_at: datetime | None = None


class Proposal(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    kind: str
    sources: list[UUID]
    canonical: UUID
    drafter: str
    fallback: str | None = None
    status: str
    edited: bool = False
    reviewer: str | None = None
    document_id: UUID | None = None
    drafted_at: datetime
    reviewed_at: datetime | None = None


class ProposalState(Result, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    kind: str
    sources: list[UUID]
    canonical: UUID
    status: str
    reviewer: str | None = None
    document_id: UUID | None = None
    document_version: int | None = None
    reviewed_at: datetime | None = None


class ProposalOutcome(Result, frozen=True, kw_only=True):
    """A proposal after review, and the text approval publishes (None once erased)."""

    proposal: ProposalState
    content: str | None = None


class Health(Result, frozen=True, kw_only=True):
    status: str
    projections: dict[str, Any] = {}
