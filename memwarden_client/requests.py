"""Every operation of the API as a request struct: its fields are the body (or, for a
``GET``, the query string), and the class knows its route and the type of its answer.
The class is the operation's ``operationId`` in PascalCase (``history`` -> ``History``); the
client's method of the same operation is the ``operationId`` itself (``client.history``).
Unset optional fields are not sent, so the server's defaults apply. No request has a
field for who you are: the key decides (admin routes name a ``target`` below you)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, ClassVar, Generic, Literal, TypeVar
from uuid import UUID

import msgspec

from memwarden_client import results as r

R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the item of a page


class Request(msgspec.Struct, Generic[R], frozen=True, kw_only=True, omit_defaults=True):
    method: ClassVar[str] = "POST"
    path: ClassVar[str]
    result: ClassVar[Any]
    path_params: ClassVar[tuple[str, ...]] = ()
    """Fields that go into the path (``{name}`` in ``path``), not the body."""
    fixed: ClassVar[dict[str, Any]] = {}
    """Body members the request always sends."""
    body_field: ClassVar[str | None] = None
    """The field whose value is the whole body (instead of the struct's fields)."""
    text: ClassVar[bool] = False
    """The answer is text, not JSON."""


class PagedRequest(Request[R], Generic[R, I], frozen=True, kw_only=True, omit_defaults=True):
    """A list (API.md "Lists": ``{items, cursor}``, ``limit`` 1-500, ``order``): ``iterate``
    follows its cursor to the end. ``items`` names the answer's list member (``items`` but
    for the as-of route's ``memories``)."""

    items: ClassVar[str] = "items"
    cursor: str | None = None


Time = datetime | date | str
"""A time-travel or compliance time: a datetime with a zone, a date (midnight UTC), or the
text forms of API.md (``now``, RFC 3339, a bare date)."""
Order = Literal["newest", "oldest"]


# -- syscalls: POST /v1/mem/<name> ------------------------------------------------------------


class ProvenanceClaim(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    source: str = "conversation"
    ref: str | None = None


class WriteItem(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One memory to write (an item of ``WriteBatch``; ``Write`` has the same fields)."""

    content: str
    type: Literal["fact", "preference", "episode", "pointer", "instruction"] | None = None
    scope: Literal["user", "assistant", "team", "org"] | None = None
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    provenance: ProvenanceClaim | None = None
    event_time: datetime | None = None
    valid_from: datetime | None = None
    verbatim: bool = False


class Write(WriteItem, Request[r.WriteResult], frozen=True, kw_only=True, omit_defaults=True):
    """Write one memory, and wait for the decision (``WriteAsync`` queues it instead)."""

    path = "/v1/mem/write"
    result = r.WriteResult


class WriteAsync(WriteItem, Request[r.Ticket], frozen=True, kw_only=True, omit_defaults=True):
    """Queue one write (202); ``WriteStatus`` with the ticket tells its result."""

    path = "/v1/mem/write"
    result = r.Ticket
    fixed: ClassVar[dict[str, Any]] = {"async": True}


class WriteBatch(Request[r.WriteBatchResult], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/write_batch"
    result = r.WriteBatchResult
    items: list[WriteItem]


class WriteStatus(Request[r.TicketStatus], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/write_status"
    result = r.TicketStatus
    ticket: UUID


class Read(Request[r.Memory], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/read"
    result = r.Memory
    id: UUID
    as_of: Time | None = None
    valid_at: Time | None = None


class Search(Request[r.SearchResults], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/search"
    result = r.SearchResults
    query: str
    k: int | None = None
    token_budget: int | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    include_retired: bool = False
    as_of: Time | None = None
    valid_at: Time | None = None


class Assemble(Request[r.Capsule], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/assemble"
    result = r.Capsule
    budget_tokens: int
    task_hint: str | None = None


class Fault(Request[r.FaultAnswer], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/fault"
    result = r.FaultAnswer
    question: str


class History(Request[r.History], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/history"
    result = r.History
    id: UUID


class Verify(Request[r.Verified], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/verify"
    result = r.Verified
    id: UUID
    supports: bool
    note: str | None = None


class Pin(Request[r.Pinned], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/pin"
    result = r.Pinned
    id: UUID


class Unpin(Request[r.Pinned], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/unpin"
    result = r.Pinned
    id: UUID


class Stats(Request[r.Stats], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/stats"
    result = r.Stats


class Policy(Request[r.Policy], frozen=True, kw_only=True, omit_defaults=True):
    """The effective policy and directives of your namespace and its ancestors."""

    path = "/v1/mem/policy"
    result = r.Policy


class PolicyAck(Request[r.Acknowledged], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/policy_ack"
    result = r.Acknowledged
    directive_id: str


class Share(Request[r.Shared], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/mem/share"
    result = r.Shared
    id: UUID
    with_namespace: str = msgspec.field(name="with")


class Forget(Request[r.Forgotten], frozen=True, kw_only=True, omit_defaults=True):
    """Erase by ``ids``, ``subject`` or ``subtree`` (one of them), with a ``reason``."""

    path = "/v1/mem/forget"
    result = r.Forgotten
    reason: str
    ids: tuple[UUID, ...] | None = None
    subject: str | None = None
    subtree: str | None = None


# -- admin: /v1/admin/… ------------------------------------------------------------------------


class CreateKey(Request[r.NewKey], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/keys"
    result = r.NewKey
    target: str
    actor: str
    role: Literal["agent", "member", "auditor", "admin", "owner"]
    max_provenance: str | None = None
    """The highest provenance source the key may claim (default: its role's)."""


class RevokeKey(Request[r.Revoked], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/keys/revoke"
    result = r.Revoked
    key_id: str


class Keys(PagedRequest[r.Page[r.KeyInfo], r.KeyInfo], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/admin/keys"
    result = r.Page[r.KeyInfo]
    limit: int | None = None
    order: Order | None = None


class DirectiveSpec(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    text: str


class NamespacePolicy(Request[r.OwnPolicy], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/admin/policies/{namespace}"
    path_params = ("namespace",)
    result = r.OwnPolicy
    namespace: str


class PutNamespacePolicy(Request[r.OwnPolicy], frozen=True, kw_only=True, omit_defaults=True):
    """A namespace's own policy, whole (an unset field inherits from the ancestors);
    ``expected_version`` makes it conditional (409 ``version_conflict``)."""

    method = "PUT"
    path = "/v1/admin/policies/{namespace}"
    path_params = ("namespace",)
    result = r.OwnPolicy
    namespace: str
    conflict_review: Literal["auto", "lower_trust", "all"] | None = None
    forbid_secrets: bool | None = None
    rate_limit_per_minute: int | None = None
    directives: tuple[DirectiveSpec, ...] = ()
    driver: str | None = None
    suspended: bool | None = None
    expected_version: int | None = None


class Disputes(PagedRequest[r.Page[r.Dispute], r.Dispute], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/admin/disputes"
    result = r.Page[r.Dispute]
    status: Literal["open", "resolved", "all"] | None = None
    limit: int | None = None
    order: Order | None = None
    namespace: str | None = None
    """Only this namespace and its descendants (within the caller's subtree)."""
    writer: str | None = None
    """Only items about a statement this actor wrote."""
    since: Time | None = None
    until: Time | None = None


class Findings(PagedRequest[r.Page[r.Finding], r.Finding], frozen=True, kw_only=True, omit_defaults=True):
    """Contradictions the conflict autopilot left for a person."""

    method = "GET"
    path = "/v1/admin/findings"
    result = r.Page[r.Finding]
    status: Literal["open", "resolved", "all"] | None = None
    limit: int | None = None
    order: Order | None = None
    namespace: str | None = None
    """Only this namespace and its descendants (within the caller's subtree)."""
    writer: str | None = None
    """Only items about a statement this actor wrote."""
    since: Time | None = None
    until: Time | None = None
    rule: str | None = None
    group: UUID | None = None
    """Only the findings about one statement (a finding's ``group_id``)."""


class ResolveFinding(Request[r.FindingState], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/findings/{finding_id}/resolve"
    path_params = ("finding_id",)
    result = r.FindingState
    finding_id: UUID
    decision: Literal["keep_a", "keep_b", "both_valid", "dismiss"]
    reason: str | None = None


class Decisions(PagedRequest[r.Page[r.Decision], r.Decision], frozen=True, kw_only=True, omit_defaults=True):
    """Contradictions the conflict autopilot settled by itself."""

    method = "GET"
    path = "/v1/admin/decisions"
    result = r.Page[r.Decision]
    status: Literal["settled", "overturned", "all"] | None = None
    limit: int | None = None
    order: Order | None = None
    namespace: str | None = None
    """Only this namespace and its descendants (within the caller's subtree)."""
    writer: str | None = None
    """Only items about a statement this actor wrote."""
    since: Time | None = None
    until: Time | None = None
    rule: str | None = None


class OverturnDecision(Request[r.DecisionState], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/decisions/{decision_id}/overturn"
    path_params = ("decision_id",)
    result = r.DecisionState
    decision_id: UUID
    reason: str | None = None


class Proposals(PagedRequest[r.Page[r.Proposal], r.Proposal], frozen=True, kw_only=True, omit_defaults=True):
    """Canonical statements the consolidation pass drafted, for review."""

    method = "GET"
    path = "/v1/admin/proposals"
    result = r.Page[r.Proposal]
    status: Literal["pending_review", "approved", "rejected", "all"] | None = None
    limit: int | None = None
    order: Order | None = None
    namespace: str | None = None
    """Only this namespace and its descendants (within the caller's subtree)."""
    writer: str | None = None
    """Only items about a statement this actor wrote."""
    since: Time | None = None
    until: Time | None = None
    rule: str | None = None


class ApproveProposal(Request[r.ProposalOutcome], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/proposals/{proposal_id}/approve"
    path_params = ("proposal_id",)
    result = r.ProposalOutcome
    proposal_id: UUID


class EditProposal(Request[r.ProposalOutcome], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/proposals/{proposal_id}/edit"
    path_params = ("proposal_id",)
    result = r.ProposalOutcome
    proposal_id: UUID
    content: str


class RejectProposal(Request[r.ProposalOutcome], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/proposals/{proposal_id}/reject"
    path_params = ("proposal_id",)
    result = r.ProposalOutcome
    proposal_id: UUID


class ResolveDispute(Request[r.DisputeState], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/admin/disputes/{dispute_id}/resolve"
    path_params = ("dispute_id",)
    result = r.DisputeState
    dispute_id: UUID
    decision: Literal["uphold_new", "keep_old", "edit", "both_valid"]
    content: str | None = None
    value: str | None = None
    reason: str | None = None


# -- compliance: /v1/compliance/… --------------------------------------------------------------


class AsOf(PagedRequest[r.AsOfPage, r.AsOfMemory], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/compliance/asof"
    result = r.AsOfPage
    items = "memories"
    as_of: Time
    valid_at: Time | None = None
    query: str | None = None
    target: str | None = None
    limit: int | None = None


class Audit(
    PagedRequest[r.Page[r.AuditRecord], r.AuditRecord], frozen=True, kw_only=True, omit_defaults=True
):
    method = "GET"
    path = "/v1/compliance/audit"
    result = r.Page[r.AuditRecord]
    since: Time | None = None
    until: Time | None = None
    actor: str | None = None
    op: str | None = None
    outcome: Literal["ok", "denied", "miss", "error"] | None = None
    limit: int | None = None
    order: Order | None = None


class VerifyLedger(Request[r.LedgerCheck], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/compliance/ledger/verify"
    result = r.LedgerCheck
    checkpoint: r.Checkpoint | None = None


class MakeCheckpoint(Request[r.Checkpoint], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/compliance/ledger/checkpoint"
    result = r.Checkpoint


class Checkpoints(
    PagedRequest[r.Page[r.Checkpoint], r.Checkpoint], frozen=True, kw_only=True, omit_defaults=True
):
    """The checkpoints the ledger signed, newest first."""

    method = "GET"
    path = "/v1/compliance/checkpoints"
    result = r.Page[r.Checkpoint]
    limit: int | None = None
    order: Order | None = None


class Certificate(Request[r.Certificate], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/compliance/certificates/{certificate_id}"
    path_params = ("certificate_id",)
    result = r.Certificate
    certificate_id: UUID


class VerifyCertificate(Request[r.CertificateCheck], frozen=True, kw_only=True, omit_defaults=True):
    """The body is the certificate itself."""

    path = "/v1/compliance/certificates/verify"
    result = r.CertificateCheck
    body_field = "certificate"
    certificate: r.Certificate


class InclusionProof(Request[r.Inclusion], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/compliance/proofs/inclusion"
    result = r.Inclusion
    position: int
    size: int


class ConsistencyProof(Request[r.Consistency], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/compliance/proofs/consistency"
    result = r.Consistency
    first: int = msgspec.field(name="from")
    second: int = msgspec.field(name="to")


class CosignCheckpoint(Request[r.Cosigned], frozen=True, kw_only=True, omit_defaults=True):
    """A witness's C2SP ``tlog-cosignature`` line for the checkpoint of tree ``size``."""

    path = "/v1/compliance/checkpoints/{size}/cosignatures"
    path_params = ("size",)
    result = r.Cosigned
    size: int
    cosignature: str


class Prove(Request[r.Proof], frozen=True, kw_only=True, omit_defaults=True):
    """Prove ledger ``position`` against the signed checkpoint of tree ``size`` (default: the newest)."""

    path = "/v1/mem/prove"
    result = r.Proof
    position: int
    size: int | None = None


# -- ops: /v1/ops/… ----------------------------------------------------------------------------


class Projections(Request[r.Projections], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/v1/ops/projections"
    result = r.Projections


class RebuildProjection(Request[r.Rebuilt], frozen=True, kw_only=True, omit_defaults=True):
    path = "/v1/ops/projections/{name}/rebuild"
    path_params = ("name",)
    result = r.Rebuilt
    name: str
    verify: bool = False


# -- health (no key needed; sent with it anyway) ------------------------------------------------


class Healthz(Request[r.Health], frozen=True, kw_only=True, omit_defaults=True):
    method = "GET"
    path = "/healthz"
    result = r.Health


class Readyz(Request[r.Health], frozen=True, kw_only=True, omit_defaults=True):
    """Ready: ledger reachable, projections within lag (else 503, raised as Unavailable)."""

    method = "GET"
    path = "/readyz"
    result = r.Health


class Metrics(Request[str], frozen=True, kw_only=True, omit_defaults=True):
    """Prometheus text."""

    method = "GET"
    path = "/metrics"
    result = str
    text: ClassVar[bool] = True
