"""Queries over ``disputes`` for reviewers, within their subtree."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.projections.listing import ListedTable


class DisputeView(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_id: UUID
    incumbent_id: UUID
    reason: str
    status: str
    decision: str | None
    reviewer: str | None
    resolution_reason: str | None
    replacement_id: UUID | None
    opened_at: datetime
    resolved_at: datetime | None


DISPUTES = ListedTable(
    table="disputes",
    columns=DisputeView.__struct_fields__,
    time="opened_at",
    memories="ARRAY[t.memory_id, t.incumbent_id]",
)
