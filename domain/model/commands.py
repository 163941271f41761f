"""Commands: what a caller asks for, imperative. Identity is never part of a command."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

import msgspec

from memwarden.domain.model.events import ConflictReview, DisputeDecision, MemoryScope, MemoryType
from memwarden.domain.model.trust import OverCap

AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""A time with its zone: a naive time cannot be ordered against the ledger's times."""


class ProvenanceClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source: str = "conversation"
    ref: str | None = None


class WriteMemory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    content: str
    type: MemoryType = "fact"
    scope: MemoryScope = "team"
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    provenance: ProvenanceClaim = ProvenanceClaim()
    event_time: AwareDatetime | None = None
    valid_from: AwareDatetime | None = None


class ResolveDispute(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    dispute_id: UUID
    decision: DisputeDecision
    content: str | None = None
    value: str | None = None
    reason: str | None = None


class VerifyMemory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    memory_id: UUID
    supports: bool
    note: str | None = None


class WritePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a namespace's effective policy that the write path applies."""

    forbid_secrets: bool = True
    max_content_bytes: int = 16_384
    provenance_over_cap: OverCap = "cap"
    """A claim above the key's ``max_provenance``: lowered to the cap, or refused."""
    conflict_review: ConflictReview = "lower_trust"
    """How a contradiction the synchronous band judges is settled (the autopilot's dial)."""
