"""Wire structs: request bodies (unknown fields refused) and responses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar, overload
from uuid import UUID

import msgspec

from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.model.autopilot import OverturnDecision, Reason, ResolveFinding
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import DisputeRuling, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.consolidation import ProposalState
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import (
    ConflictReview,
    Directive,
    FindingDecision,
)
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.passes import PassesHealth
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.model.storable import unstorable_field
from memwarden.domain.model.text import escape_unprintable, quote_text
from memwarden.domain.model.times import parse_time_text
from memwarden.domain.model.trust import OverCap
from memwarden.domain.model.write import MAX_BATCH_ITEMS, Rejection
from memwarden.domain.services.write_results import (
    BatchItem,
    FactResult,
    ProvenanceCapped,
    WriteResult,
)
from memwarden.projections.search.service import SearchQuery, SearchTerms

ComplianceTime = Annotated[
    str,
    msgspec.Meta(
        description="`now`, RFC 3339 with a zone, or a bare date meaning midnight UTC",
        examples=["2026-03-01T09:30:00Z", "2026-03-01", "now"],
        max_length=64,
    ),
]
"""A time-travel or compliance time (API.md): the forms the CLI accepts too; read it with
``compliance_time``."""


@overload
def compliance_time(name: str, text: str) -> datetime: ...
@overload
def compliance_time(name: str, text: None) -> None: ...
@overload
def compliance_time(name: str, text: str | None) -> datetime | None: ...
def compliance_time(name: str, text: str | None) -> datetime | None:
    """The time a field names (``now`` is this moment), or InvalidRequest naming the field."""
    if text is None:
        return None
    try:
        return parse_time_text(text, now=datetime.now(UTC))
    except ValueError as error:
        raise InvalidRequest(f"{name} {error}") from None


S = TypeVar("S", bound=msgspec.Struct)


def struct_of(source: msgspec.Struct, kind: type[S], **given: Any) -> S:
    """The struct ``kind`` made of ``source``'s fields of the same names (a body's command,
    a result's response), but those ``given``: named otherwise at the edge, or taken from
    elsewhere (the path). One conversion for every such pair, never a field copied by hand."""
    fields = {name: getattr(source, name) for name in kind.__struct_fields__ if name not in given}
    return kind(**fields, **given)


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every request body. Every field of every body holds only what PostgreSQL can
    store: text without NUL or lone surrogates, times within years 1-9999 in UTC (else the
    decode fails naming the field: a 400)."""

    def __post_init__(self) -> None:
        problem = unstorable_field(self)
        if problem is not None:
            raise ValueError(problem)


class WriteItemBody(WriteMemory, Body, frozen=True, kw_only=True):
    """A write's fields and how to take its content: one item of ``write_batch``. The wire
    form of ``WriteMemory`` (the command), which ``command()`` makes."""

    # It extends the command, so its fields are the command's by construction; the docstring
    # above is part of the MCP tool listing (write_batch's item), kept as it was.

    verbatim: bool = False
    """True: store the content as it is, even when an extractor is configured to split it."""

    def command(self) -> WriteMemory:
        return struct_of(self, WriteMemory)

    def batch_item(self) -> BatchItem:
        return BatchItem(command=self.command(), verbatim=self.verbatim)


class WriteBody(WriteItemBody, frozen=True, kw_only=True):
    """A write, plus how the API should run it."""

    run_async: bool = msgspec.field(default=False, name="async")


WRITE_ITEM_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(WriteItemBody))


class WriteBatchBody(Body, frozen=True, kw_only=True):
    """Up to ``MAX_BATCH_ITEMS`` write bodies. The batch's shape is checked whole (a list of
    objects naming only write fields, else 400); each item's values are read on their own by
    ``entries``, so a bad item is rejected with its reason and the rest go in."""

    items: Annotated[
        list[dict[str, Any]],
        msgspec.Meta(
            min_length=1,
            max_length=MAX_BATCH_ITEMS,
            description="write bodies (the fields of `write`, without `async`)",
        ),
    ]

    def __post_init__(self) -> None:
        """Nothing to check whole: ``entries`` reads every item's values one by one."""

    def entries(self) -> list[BatchItem | Rejection]:
        return [batch_entry(f"items[{index}]", raw) for index, raw in enumerate(self.items)]


def batch_entry(where: str, raw: dict[str, Any]) -> BatchItem | Rejection:
    """One item (``where``: how to name it) as the service takes it, or why its values
    cannot be (a rejection of that item alone). A field no write has is a malformed
    batch: InvalidRequest for all of it."""
    unknown = next((name for name in raw if name not in WRITE_ITEM_FIELDS), None)
    if unknown is not None:
        raise InvalidRequest(f"{where}: unknown field {quote_text(unknown, 50)}")
    problem = unstorable_field(raw, where)
    if problem is not None:
        return Rejection("unstorable", problem)
    try:
        return msgspec.convert(raw, WriteItemBody).batch_item()
    except msgspec.ValidationError as error:
        return Rejection("invalid_request", f"{where}: {escape_unprintable(str(error)[:300])}")


class WriteResponse(msgspec.Struct, frozen=True, kw_only=True):
    outcome: str
    id: UUID | None
    supersedes: tuple[UUID, ...]
    dispute_id: UUID | None
    position: int
    classification: Classification | None
    rejected: tuple[Rejection, ...]
    extracted: bool
    """Whether the content was split into facts (then ``facts`` holds each one's result,
    and the fields above are the first fact's); false: stored verbatim, see ``verbatim_reason``."""
    verbatim_reason: str | None
    """Why not split: ``no_extractor``, ``verbatim_requested``, ``structured``, ``tags_full``,
    ``over_budget``, ``extractor_failed: <kind>``, or ``facts_rejected`` (every fact was, so
    the content was decided whole); null when extracted."""
    facts: tuple[FactResult, ...]
    provenance_capped: ProvenanceCapped | None = None
    """Set when the claimed provenance was above the key's ``max_provenance`` and the
    namespace's policy lowered it: what was claimed and what the memory carries."""
    findings: tuple[UUID, ...] = ()
    """Findings the write opened in its own append: contradictions its synchronous band
    judged that the namespace's ``conflict_review`` dial leaves to a reviewer (the new
    memory is stored and stays current). Read them at ``GET /v1/admin/findings``."""
    decisions: tuple[UUID, ...] = ()
    """Automatic settlements the write made in its own append (a judged contradiction the
    dial lets the new memory win): each a decision with its rule and explanation, listed at
    ``GET /v1/admin/decisions`` and overturnable there."""

    @classmethod
    def of(cls, result: WriteResult) -> WriteResponse:
        return struct_of(result, cls)


class WriteBatchResponse(msgspec.Struct, frozen=True, kw_only=True):
    results: list[WriteResponse]
    """One per item, in order; each as ``write`` answers (all share the batch's ``position``)."""


class TicketResponse(msgspec.Struct, frozen=True):
    ticket: UUID


class TicketBody(Body, frozen=True, kw_only=True):
    ticket: UUID


class TicketStatus(msgspec.Struct, frozen=True, kw_only=True):
    state: Literal["pending", "running", "done", "failed"]
    result: dict[str, Any] | None = None


class IdBody(Body, frozen=True, kw_only=True):
    id: UUID


class ReadBody(Body, frozen=True, kw_only=True):
    """``as_of``: the memory as the system knew it then; ``valid_at``: only if it held then."""

    id: UUID
    as_of: ComplianceTime | None = None
    valid_at: ComplianceTime | None = None


class VerifyBody(Body, frozen=True, kw_only=True):
    """``VerifyMemory`` with its ``memory_id`` named ``id`` on the wire, as every body names
    the memory it is about (tests/unit/test_wire_shapes.py holds the two equal)."""

    id: UUID
    supports: bool
    note: str | None = None

    def command(self) -> VerifyMemory:
        return struct_of(self, VerifyMemory, memory_id=self.id)


class VerifyResponse(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    trust_tier: str
    position: int


class HistoryResponse(msgspec.Struct, frozen=True, kw_only=True):
    versions: list[Any]


class PinResponse(msgspec.Struct, frozen=True):
    pinned: bool


class ShareBody(Body, frozen=True, kw_only=True):
    id: UUID
    with_namespace: str = msgspec.field(name="with")


class ShareResponse(msgspec.Struct, frozen=True):
    share_id: UUID


class AckBody(Body, frozen=True, kw_only=True):
    directive_id: str


class AckResponse(msgspec.Struct, frozen=True):
    acknowledged: bool


class DirectiveView(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    text: str
    namespace: str
    acknowledged: bool


class PolicyResponse(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    conflict_review: ConflictReview
    forbid_secrets: bool
    rate_limit_per_minute: int
    driver: str | None
    suspended: bool
    directives: list[DirectiveView]
    provenance_over_cap: OverCap


class StatsResponse(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    current: int
    disputed: int
    retired: int
    erased: int
    shared_in: int
    pinned: int
    open_disputes: int
    # fault_hit_rate is null before the
    # first fault: "none yet" and "not measured" must not look the same
    open_findings: int | None
    open_proposals: int | None
    unjudged: int | None
    fault_hit_rate: float | None
    projection_lag: int
    passes: PassesHealth | None = None
    """Who runs the conflict autopilot and consolidation, and whether anyone consumes them."""


class NewKeyBody(IssueKey, Body, frozen=True, kw_only=True):
    """``IssueKey``, as the admin route takes it."""

    def command(self) -> IssueKey:
        return struct_of(self, IssueKey)


class NewKeyResponse(msgspec.Struct, frozen=True):
    key_id: str
    key: str


class RevokeBody(Body, frozen=True, kw_only=True):
    key_id: str


class RevokeResponse(msgspec.Struct, frozen=True):
    revoked: bool


class PolicyPutBody(PolicyBody, Body, frozen=True, kw_only=True):
    """A namespace's own policy (``PolicyBody``'s fields; ``None`` = inherit);
    ``expected_version`` (or If-Match) guards a concurrent change."""

    expected_version: int | None = None

    def policy(self) -> PolicyBody:
        return struct_of(self, PolicyBody)


class OwnPolicyResponse(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    version: int
    conflict_review: ConflictReview | None
    forbid_secrets: bool | None
    rate_limit_per_minute: int | None
    directives: tuple[Directive, ...]
    driver: str | None
    suspended: bool | None
    provenance_over_cap: OverCap | None
    effective: PolicyResponse


class ResolveBody(DisputeRuling, Body, frozen=True, kw_only=True):
    """A ruling on the dispute the path names: ``ResolveDispute`` bar its ``dispute_id``."""

    def command(self, dispute_id: UUID) -> ResolveDispute:
        return struct_of(self, ResolveDispute, dispute_id=dispute_id)


class FindingResolveBody(Body, frozen=True, kw_only=True):
    decision: FindingDecision
    reason: Reason | None = None

    def command(self, finding_id: UUID) -> ResolveFinding:
        return struct_of(self, ResolveFinding, finding_id=finding_id)


class ProposalEditBody(Body, frozen=True, kw_only=True):
    content: Annotated[str, msgspec.Meta(min_length=1, max_length=8000)]


class ProposalResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A proposal and the text approval publishes (null once its drafted memory is erased)."""

    proposal: ProposalState
    content: str | None


class OverturnBody(Body, frozen=True, kw_only=True):
    reason: Reason | None = None

    def command(self, decision_id: UUID) -> OverturnDecision:
        return struct_of(self, OverturnDecision, decision_id=decision_id)


class VerifyLedgerBody(Body, frozen=True, kw_only=True):
    checkpoint: Checkpoint | None = None


class Head(msgspec.Struct, frozen=True):
    position: int
    hash: str


class VerifyLedgerResponse(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    checked: int
    head: Head
    first_bad_position: int | None
    problem: str | None = None


class SearchBody(Body, SearchTerms, frozen=True, kw_only=True):
    """The wire form of a ``SearchQuery``: its terms, and its times as the CLI writes them."""

    as_of: ComplianceTime | None = None
    valid_at: ComplianceTime | None = None

    def search_query(self) -> SearchQuery:
        return SearchQuery.of(
            self, compliance_time("as_of", self.as_of), compliance_time("valid_at", self.valid_at)
        )


class AssembleBody(Body, frozen=True, kw_only=True):
    budget_tokens: int
    task_hint: str | None = None


class FaultBody(Body, frozen=True, kw_only=True):
    question: str
