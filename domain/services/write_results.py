"""What a write answers (one result per fact, a batch's results) and the constants that
name how its content was taken."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import msgspec

from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.write import Outcome, Rejection, WriteDecision

EMBEDDING_UNAVAILABLE = "embedding unavailable"
# Why a write's content was stored verbatim (besides an ExtractionFailed's reason):
NO_EXTRACTOR = "no_extractor"
VERBATIM_REQUESTED = "verbatim_requested"
STRUCTURED = "structured"  # a slot's value is one fact already
TAGS_FULL = "tags_full"  # no room for the marker tag
FACTS_REJECTED = "facts_rejected"  # every extracted fact was rejected
QUEUED_OP = "write_ticket"
"""The audit op of a queued (``async``) write when it runs."""
EXTRACTED_TAG = "extracted"
"""The tag every extracted fact carries (its provenance is the write's own)."""


class ProvenanceCapped(msgspec.Struct, frozen=True, kw_only=True):
    """A provenance claim above the key's cap, and the source the memory carries instead."""

    claimed: str
    applied: str


class FactResult(msgspec.Struct, frozen=True, kw_only=True):
    """The decision on one extracted fact (its text is not repeated: read it by ``id``)."""

    outcome: Outcome
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    provenance_capped: ProvenanceCapped | None = None
    findings: tuple[UUID, ...] = ()
    decisions: tuple[UUID, ...] = ()


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    """A write's result: when the content was split (``extracted``), ``facts`` holds each
    fact's decision and the top-level fields describe the first; otherwise
    ``verbatim_reason`` says why the content was stored as it came."""

    outcome: Outcome
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    position: int
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    extracted: bool = False
    verbatim_reason: str | None = None
    facts: tuple[FactResult, ...] = ()
    provenance_capped: ProvenanceCapped | None = None
    findings: tuple[UUID, ...] = ()
    """Findings the synchronous band opened in the write's own append: contradictions the
    namespace's ``conflict_review`` dial leaves to a person (the new memory is stored)."""
    decisions: tuple[UUID, ...] = ()
    """The band's automatic settlements in the same append: each a decision with its rule
    and explanation, which a reviewer may overturn."""


class Split(msgspec.Struct, frozen=True, kw_only=True):
    """What a write decides: the extracted facts, or the command itself and why."""

    commands: tuple[WriteMemory, ...]
    verbatim_reason: str | None

    @property
    def extracted(self) -> bool:
        return self.verbatim_reason is None


class BatchItem(msgspec.Struct, frozen=True, kw_only=True):
    """One write of a batch, as ``write`` takes it."""

    command: WriteMemory
    verbatim: bool = False


class BatchResult(msgspec.Struct, frozen=True, kw_only=True):
    """One result per item, in order; all share the batch's one append (``position``)."""

    results: tuple[WriteResult, ...]
    position: int


def capped(decision: WriteDecision) -> ProvenanceCapped | None:
    if decision.provenance_capped is None:
        return None
    claimed, applied = decision.provenance_capped
    return ProvenanceCapped(claimed=claimed, applied=applied)


def write_result(decisions: Sequence[WriteDecision], split: Split, position: int) -> WriteResult:
    facts = tuple(
        FactResult(
            outcome=d.outcome,
            id=d.memory_id,
            supersedes=d.supersedes,
            dispute_id=d.dispute_id,
            classification=d.classification,
            rejected=d.rejected,
            provenance_capped=capped(d),
            findings=d.findings,
            decisions=d.decisions,
        )
        for d in decisions
    )
    first = facts[0]
    return WriteResult(
        **msgspec.structs.asdict(first),
        position=position,
        extracted=split.extracted,
        verbatim_reason=split.verbatim_reason,
        facts=facts if split.extracted else (),
    )
