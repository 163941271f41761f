"""Domain events: past tense, immutable, one stream each (``stream_id``).

Fields listed in ``SEALED`` hold plaintext only in memory: the ledger stores them
encrypted with the data key of the event's ``sealing_owner`` (a memory, or a knowledge
document; see domain/ledger/sealing.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar, Literal
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec

from memwarden.domain.model.certificates import DeletionCertificate
from memwarden.domain.model.classification import Classification

MemoryType = Literal["fact", "preference", "episode", "pointer", "instruction"]
MemoryScope = Literal["user", "assistant", "team", "org"]
MemoryStatus = Literal["active", "disputed", "retired", "erased"]
TrustTier = Literal["candidate", "canonical", "verified"]
SupersedenceKind = Literal["succession", "correction"]
ClaimKind = Literal["text", "slot", "source_ref"]
DisputeDecision = Literal["uphold_new", "keep_old", "edit", "both_valid"]


class Provenance(msgspec.Struct, frozen=True):
    source: str
    actor: str
    ref: str | None = None


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Base of every event. ``at`` is the decision time the service passed in."""

    at: datetime
    SEALED: ClassVar[tuple[str, ...]] = ()
    STREAM: ClassVar[str] = ""
    """The field whose value is the event's stream id (the aggregate it belongs to); an event
    whose stream is derived otherwise overrides ``stream_id``."""

    @property
    def stream_id(self) -> UUID:
        if not self.STREAM:
            raise NotImplementedError(f"{type(self).__name__} names no stream")
        stream: UUID = getattr(self, self.STREAM)
        return stream

    @property
    def sealing_owner(self) -> UUID:
        """Whose data key seals the ``SEALED`` fields: destroying that key erases them.
        Only event types with sealed fields have one."""
        raise NotImplementedError


class MemoryEvent(Event, frozen=True, kw_only=True):
    memory_id: UUID

    STREAM: ClassVar[str] = "memory_id"

    @property
    def sealing_owner(self) -> UUID:
        return self.memory_id


class MemoryWritten(MemoryEvent, frozen=True, kw_only=True):
    # Everything that can name a person is sealed: erasure (destroying the data key)
    # leaves none of it readable. Older records sealed only content and value.
    # ``embedding`` (appended last: older records sealed fewer fields) is computed once at
    # write time, so a replay never re-embeds; ``embedding_model`` says which model made it.
    SEALED: ClassVar[tuple[str, ...]] = (
        "content",
        "value",
        "subject",
        "attribute",
        "tags",
        "selectors",
        "provenance",
        "embedding",
    )
    namespace: str
    actor: str
    type: MemoryType
    scope: MemoryScope
    content: str | None
    value: str | None = None
    subject: str | None = None
    attribute: str | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    provenance: tuple[Provenance, ...]
    event_time: datetime | None = None
    valid_from: datetime
    status: Literal["active", "disputed"]
    trust_tier: TrustTier
    supersedes: tuple[UUID, ...] = ()
    classification: Classification
    reason: str | None = None
    embedding: bytes | None = None
    embedding_model: str | None = None
    band_judged: tuple[UUID, ...] = ()
    """The neighbours the write's synchronous band judged this memory against, whatever
    the verdict: the autopilot's pass leaves those pairs alone (each pair judged once)."""


class MemorySuperseded(MemoryEvent, frozen=True, kw_only=True):
    """``succession`` closes valid time; ``correction`` retires in system time."""

    by: UUID
    kind: SupersedenceKind
    reason: str
    valid_to: datetime | None = None


class MemoryReleased(MemoryEvent, frozen=True, kw_only=True):
    """A quarantined memory became active because a reviewer accepted it."""

    dispute_id: UUID
    supersedes: tuple[UUID, ...] = ()


class MemoryRetired(MemoryEvent, frozen=True, kw_only=True):
    """The system stopped believing the memory (e.g. rejected in review).

    A review names the memory it kept (``kept``, keep_old) or the reviewer's corrected
    memory that replaces it (``replaced_by``, edit), so history can link the step.
    """

    reason: str
    dispute_id: UUID | None = None
    kept: UUID | None = None
    replaced_by: UUID | None = None


class MemoryReaffirmed(MemoryEvent, frozen=True, kw_only=True):
    """An identical later write: its provenance joins the memory (dedupe).

    ``trust_tier`` is the tier after the join: a verifier that becomes a writer no
    longer counts as independent.
    """

    SEALED: ClassVar[tuple[str, ...]] = ("provenance",)
    provenance: Provenance | None  # None only in a tombstone (its data key destroyed)
    trust_tier: TrustTier | None = None


class MemoryVerified(MemoryEvent, frozen=True, kw_only=True):
    SEALED: ClassVar[tuple[str, ...]] = ("note",)
    actor: str
    supports: bool
    note: str | None = None
    trust_tier: TrustTier


class MemoryErased(MemoryEvent, frozen=True, kw_only=True):
    """The memory's data key was destroyed in the same transaction: its sealed fields
    are unrecoverable from here on. Its tombstone stays (id, namespace, times)."""

    namespace: str
    certificate_id: UUID
    by: str


class MemoryReembedded(MemoryEvent, frozen=True, kw_only=True):
    """The memory's text embedded again by another model (a new default embedder): its
    vector of ``embedding_model``, sealed with the memory's own data key exactly as
    ``MemoryWritten``'s, so an erasure leaves it unreadable too. The search index keeps it
    aside until that model is adopted (``EmbeddingModelAdopted``)."""

    SEALED: ClassVar[tuple[str, ...]] = ("embedding",)
    namespace: str
    embedding: bytes | None  # None only in a tombstone (its data key destroyed)
    embedding_model: str


EMBEDDING_MODEL_STREAM = uuid5(NAMESPACE_URL, "memwarden:embedding-model")
"""The stream of the serving model's switches: one for the whole ledger."""


class EmbeddingModelAdopted(Event, frozen=True, kw_only=True):
    """The search index serves vectors of ``model`` from here on: every memory with content
    had one when it was decided (the re-embedding pass appends it once none is missing)."""

    model: str
    dimensions: int
    previous: str | None = None

    @property
    def stream_id(self) -> UUID:
        return EMBEDDING_MODEL_STREAM


class ErasureCertified(Event, frozen=True, kw_only=True):
    """The signed deletion certificate of one erasure, appended with its MemoryErased and
    KnowledgeErased events."""

    certificate: DeletionCertificate

    @property
    def stream_id(self) -> UUID:
        return self.certificate.id


class DisputeEvent(Event, frozen=True, kw_only=True):
    dispute_id: UUID

    STREAM: ClassVar[str] = "dispute_id"


class DisputeOpened(DisputeEvent, frozen=True, kw_only=True):
    namespace: str
    memory_id: UUID
    incumbent_id: UUID
    reason: str


class DisputeResolved(DisputeEvent, frozen=True, kw_only=True):
    decision: DisputeDecision
    reviewer: str
    reason: str | None = None
    replacement_id: UUID | None = None


class ClaimSet(Event, frozen=True, kw_only=True):
    """The current holders of a claim (a slot, a normalized text, a source ref).

    Claims are the optimistic-concurrency handles of the write path: two writers that
    decide on the same claim append the same version of its stream and one of them loses.
    The latest event is the whole state of a claim stream.
    """

    claim_id: UUID
    kind: ClaimKind
    namespace: str
    holders: tuple[UUID, ...]

    STREAM: ClassVar[str] = "claim_id"


AuditOutcome = Literal["ok", "denied", "miss", "error", "client_closed"]
"""How a syscall ended, as its audit record says: the one definition, imported everywhere."""


class AuditRecorded(Event, frozen=True, kw_only=True):
    record_id: UUID
    actor: str
    namespace: str
    role: str
    op: str
    outcome: AuditOutcome
    detail: str = ""
    subject_ids: tuple[UUID, ...] = ()

    STREAM: ClassVar[str] = "record_id"


# -- governance: keys, policies, shares, pins ------------------------------------------------

ConflictReview = Literal["auto", "lower_trust", "all"]


class KeyIssued(Event, frozen=True, kw_only=True):
    """An API key was minted. Only a keyed hash of its secret is kept (never the secret)."""

    key_id: str
    key_hash: str
    namespace: str
    actor: str
    role: str
    issued_by: str
    max_provenance: str | None = None
    """The highest provenance the key may claim; None (every key made before keys carried
    one): the role's default, so an old agent key claims no more than ``conversation``."""

    @property
    def stream_id(self) -> UUID:
        return UUID(hex=self.key_id)


class KeyRevoked(Event, frozen=True, kw_only=True):
    key_id: str
    revoked_by: str

    @property
    def stream_id(self) -> UUID:
        return UUID(hex=self.key_id)


class Directive(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str
    text: str


class PolicySet(Event, frozen=True, kw_only=True):
    """A namespace's own policy, whole (``None`` = inherit from the ancestors)."""

    policy_id: UUID
    namespace: str
    conflict_review: ConflictReview | None = None
    forbid_secrets: bool | None = None
    rate_limit_per_minute: int | None = None
    directives: tuple[Directive, ...] = ()
    driver: str | None = None
    suspended: bool | None = None
    members_forget_own: bool | None = None
    provenance_over_cap: str | None = None
    set_by: str

    STREAM: ClassVar[str] = "policy_id"


class DirectiveAcknowledged(Event, frozen=True, kw_only=True):
    ack_id: UUID
    namespace: str
    actor: str
    directive_id: str
    directive_namespace: str

    STREAM: ClassVar[str] = "ack_id"


class MemoryShared(Event, frozen=True, kw_only=True):
    """A memory made visible to another namespace's scope (in the same tenant)."""

    share_id: UUID
    memory_id: UUID
    memory_namespace: str
    with_namespace: str
    by: str

    STREAM: ClassVar[str] = "share_id"


class PinSet(Event, frozen=True, kw_only=True):
    """A memory pinned (or unpinned) for a namespace's working set."""

    pin_id: UUID
    namespace: str
    memory_id: UUID
    pinned: bool
    by: str

    STREAM: ClassVar[str] = "pin_id"


# -- reads: capsules, faults, knowledge (L3) ---------------------------------------------------

FaultTier = Literal["L2", "L3", "miss"]


class CapsuleIssued(Event, frozen=True, kw_only=True):
    """A working set handed to an agent: what it saw (``refs``), under which signed root,
    at which ledger position. Access telemetry (last used, use count) is derived from these."""

    capsule_id: UUID
    namespace: str
    actor: str
    refs: tuple[UUID, ...]
    merkle_root: str
    read_position: int
    key_id: str
    signature: str

    STREAM: ClassVar[str] = "capsule_id"


class ContextFaulted(Event, frozen=True, kw_only=True):
    """A question the working set could not answer, and which tier answered it. A miss or
    an L3 answer counts against ``best_candidate`` (the best L2 memory): its fault count."""

    fault_id: UUID
    namespace: str
    actor: str
    tier: FaultTier
    score: float
    best_candidate: UUID | None = None
    refs: tuple[UUID, ...] = ()

    STREAM: ClassVar[str] = "fault_id"


class KnowledgeChunk(msgspec.Struct, frozen=True, kw_only=True):
    """One searchable section of a knowledge document; its embedding made at publication."""

    chunk_id: UUID
    heading: str
    text: str
    embedding: bytes | None = None


class KnowledgePublished(Event, frozen=True, kw_only=True):
    """An immutable version of an L3 knowledge document (markdown with YAML front matter).

    One stream per (namespace, slug); each version is a new event, never an edit. The
    content is sealed with the document's data key (one for all its versions); so is
    ``content_hash``: a plain hash of the content would outlive the key and confirm a
    guessed text. Records from before sealing hold everything in the clear.
    """

    SEALED: ClassVar[tuple[str, ...]] = ("title", "body", "chunks", "content_hash")
    document_id: UUID
    namespace: str
    slug: str
    version: int
    title: str
    body: str
    tags: tuple[str, ...] = ()
    content_hash: str
    source: str
    published_by: str
    chunks: tuple[KnowledgeChunk, ...]
    embedding_model: str | None = None

    STREAM: ClassVar[str] = "document_id"

    @property
    def sealing_owner(self) -> UUID:
        return self.document_id

    @property
    def shredded(self) -> bool:
        """The document's data key was destroyed: its sealed fields are empty for good (a
        publication always has a body)."""
        return not self.body


class KnowledgeErased(Event, frozen=True, kw_only=True):
    """The document's data key was destroyed in the same transaction (a ``forget``): every
    version's sealed fields are unrecoverable from here on, and no version follows. Carries
    no content; its tombstone is the id, the namespace and the certificate."""

    document_id: UUID
    namespace: str
    certificate_id: UUID
    by: str

    STREAM: ClassVar[str] = "document_id"


# -- workers: leases, the conflict autopilot, findings, automatic settlements -----------------

FindingDecision = Literal["keep_a", "keep_b", "both_valid", "dismiss"]
JudgedOutcome = Literal["judged", "judge_unavailable", "unembedded", "not_current"]


class LeaseEvent(Event, frozen=True, kw_only=True):
    """A pass's lease on a namespace (one stream per (pass, namespace)). Every event is the
    whole state: who holds it, its fencing token, until when. A pass's append carries a
    lease event at the stream's next version, so an append by a holder whose lease was
    taken over conflicts on this stream and is refused with everything in it."""

    lease_id: UUID
    pass_name: str
    namespace: str
    holder: str
    token: int
    expires_at: datetime

    STREAM: ClassVar[str] = "lease_id"


class LeaseTaken(LeaseEvent, frozen=True, kw_only=True):
    """A holder took the lease (never held, released, or expired): a new, higher token."""


class LeaseReleased(LeaseEvent, frozen=True, kw_only=True):
    """The holder's pass is done: the lease is free (``expires_at`` is the release time).
    The pass's own append carries it, at the lease stream's next version: its fence."""


class ConflictsJudged(Event, frozen=True, kw_only=True):
    """The autopilot's pass over one memory: how many older neighbours it judged and what
    came of it. One stream per memory (``judgement_id``), so a redelivered message that
    would judge it again conflicts on version 1 and changes nothing. ``judge_unavailable``
    (or ``unembedded``: no vector to find neighbours by) leaves the memory unjudged; a later
    pass may judge it (version 2)."""

    judgement_id: UUID
    memory_id: UUID
    namespace: str
    outcome: JudgedOutcome
    judge: str | None = None
    pairs: int = 0
    contradictions: int = 0
    token: int = 0

    STREAM: ClassVar[str] = "judgement_id"


class FindingOpened(Event, frozen=True, kw_only=True):
    """A contradiction the autopilot did not settle: for a person. ``memory_a`` is the older
    memory, ``memory_b`` the one whose pass found it. ``explanation`` is the judge's, which
    never quotes the memories."""

    finding_id: UUID
    namespace: str
    memory_a: UUID
    memory_b: UUID
    judge: str
    rule: str
    explanation: str
    cosine: float

    STREAM: ClassVar[str] = "finding_id"


class FindingResolved(Event, frozen=True, kw_only=True):
    finding_id: UUID
    decision: FindingDecision
    reviewer: str
    reason: str | None = None

    STREAM: ClassVar[str] = "finding_id"


class ConflictSettled(Event, frozen=True, kw_only=True):
    """An automatic settlement: ``winner`` superseded ``loser`` (reason ``autopilot``)."""

    decision_id: UUID
    namespace: str
    winner: UUID
    loser: UUID
    judge: str
    rule: str
    explanation: str
    dial: ConflictReview

    STREAM: ClassVar[str] = "decision_id"


class SettlementOverturned(Event, frozen=True, kw_only=True):
    """A reviewer reversed an automatic settlement: the loser's fact is current again as
    ``restored`` (a new memory superseding the winner)."""

    decision_id: UUID
    reviewer: str
    restored: UUID
    reason: str | None = None

    STREAM: ClassVar[str] = "decision_id"


ProposalKind = Literal["near_duplicate", "slot_history", "faulted_together", "fault_near_miss"]


class ProposalDrafted(Event, frozen=True, kw_only=True):
    """Consolidation drafted a canonical statement for a cluster of memories, for a person
    to approve, edit or reject. The extractive drafter names the memory it chose
    (``canonical``) instead of copying its text, so erasing that memory erases the draft.
    One stream per cluster (``proposal_id`` is derived from it): drafted once."""

    proposal_id: UUID
    namespace: str
    kind: ProposalKind
    sources: tuple[UUID, ...]
    canonical: UUID
    drafter: str
    token: int = 0
    fallback: str | None = None
    """Why the configured model drafter did not draft it (the extractive one did):
    ``timeout``, ``bad_answer``, ``invisible_character`` ...; None when it did, or none is
    configured."""

    STREAM: ClassVar[str] = "proposal_id"


class ProposalText(Event, frozen=True, kw_only=True):
    """A proposal's text (its subclasses add ``content``), sealed with the proposal's own
    data key, which erasing any source the text may draw on destroys."""

    SEALED: ClassVar[tuple[str, ...]] = ("content",)
    proposal_id: UUID

    STREAM: ClassVar[str] = "proposal_id"

    @property
    def sealing_owner(self) -> UUID:
        return self.proposal_id


class ProposalTextDrafted(ProposalText, frozen=True, kw_only=True):
    """A model drafter wrote the proposal's statement from its sources (appended with its
    ``ProposalDrafted``)."""

    drafter: str
    content: str


class ProposalEdited(ProposalText, frozen=True, kw_only=True):
    """A reviewer replaced the draft's text."""

    reviewer: str
    content: str


class ProposalApproved(Event, frozen=True, kw_only=True):
    """A reviewer approved the proposal: it was published as ``document_id`` ``version``
    (L3, ``consolidation`` provenance)."""

    proposal_id: UUID
    reviewer: str
    document_id: UUID
    version: int

    STREAM: ClassVar[str] = "proposal_id"


class ProposalRejected(Event, frozen=True, kw_only=True):
    proposal_id: UUID
    reviewer: str

    STREAM: ClassVar[str] = "proposal_id"


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        MemoryWritten,
        MemorySuperseded,
        MemoryReleased,
        MemoryRetired,
        MemoryReaffirmed,
        MemoryVerified,
        MemoryErased,
        MemoryReembedded,
        EmbeddingModelAdopted,
        ErasureCertified,
        DisputeOpened,
        DisputeResolved,
        ClaimSet,
        AuditRecorded,
        KeyIssued,
        KeyRevoked,
        PolicySet,
        DirectiveAcknowledged,
        MemoryShared,
        PinSet,
        CapsuleIssued,
        ContextFaulted,
        KnowledgePublished,
        KnowledgeErased,
        LeaseTaken,
        LeaseReleased,
        ConflictsJudged,
        FindingOpened,
        FindingResolved,
        ConflictSettled,
        SettlementOverturned,
        ProposalDrafted,
        ProposalTextDrafted,
        ProposalEdited,
        ProposalApproved,
        ProposalRejected,
    )
}
