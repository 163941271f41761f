"""Queries over ``disputes`` for reviewers, within their subtree."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.domain.model.namespaces import subtree_like_pattern


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


def list_disputes(
    conn: Connection[Any], schema: str, root: str, status: str | None = "open", limit: int = 100
) -> list[DisputeView]:
    """Disputes in ``root``'s subtree (the namespace itself and its descendants)."""
    condition = SQL("") if status is None else SQL(" AND status = %(status)s")
    rows = conn.execute(
        SQL(
            "SELECT id, namespace, memory_id, incumbent_id, reason, status, decision, reviewer,"
            " resolution_reason, replacement_id, opened_at, resolved_at FROM {s}.disputes"
            " WHERE (namespace = %(root)s OR namespace LIKE %(pattern)s ESCAPE '\\')"
            "{condition} ORDER BY opened_at, id LIMIT %(limit)s"
        ).format(s=Identifier(schema), condition=condition),
        {"root": root, "pattern": subtree_like_pattern(root), "status": status, "limit": limit},
    ).fetchall()
    return [msgspec.convert(row, DisputeView) for row in rows]
