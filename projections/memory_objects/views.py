"""Queries over ``memory_objects``, always inside the caller's scope.

The scope is the caller's namespace and its ancestors, passed as one bound array
(``namespace = ANY(%s)``): never a pattern, so ``acme/eng`` cannot match ``acme/engineering``.
A memory outside the scope and a missing memory look the same (None).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Composable, Identifier

from memwarden.domain.model.classification import Classification
from memwarden.projections.scopes import in_subtree


class ProvenanceView(msgspec.Struct, frozen=True):
    source: str
    actor: str
    ref: str | None = None
    content_hash: str | None = None


class VerificationView(msgspec.Struct, frozen=True):
    actor: str
    supports: bool
    at: datetime


class MemoryView(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    scope: str
    type: str
    content: str | None
    subject: str | None
    attribute: str | None
    value: str | None
    tags: list[str]
    selectors: list[str]
    provenance: list[ProvenanceView]
    event_time: datetime | None
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None
    retired_at: datetime | None
    status: str
    trust_tier: str
    supersedes: list[UUID]
    superseded_by: list[UUID]
    classification: Classification
    verifications: list[VerificationView]


class HistoryStep(msgspec.Struct, frozen=True, kw_only=True):
    """One version in a supersedence chain, with the step that led away from it."""

    id: UUID
    content: str | None
    status: str
    trust_tier: str
    recorded_at: datetime
    retired_at: datetime | None
    valid_from: datetime
    valid_to: datetime | None
    superseded_by: UUID | None = None
    kind: str | None = None
    reason: str | None = None
    at: datetime | None = None


_COLUMNS = (
    "id, namespace, scope, type, content, subject, attribute, value, tags, selectors, provenance,"
    " event_time, recorded_at, valid_from, valid_to, retired_at, status, trust_tier, supersedes,"
    " superseded_by, classification, verifications"
)


def to_view(row: dict[str, Any]) -> MemoryView:
    return msgspec.convert(row, MemoryView)


HIDDEN = "(m.status = 'disputed' OR m.erased_in_quarantine)"
"""What no read shows (of ``memory_objects m``): a quarantined memory, or the tombstone of
one erased while quarantined. Reviewers see both in their subtree's history only."""


def read_memory(
    conn: Connection[Any],
    schema: str,
    scope: Sequence[str],
    memory_id: UUID,
    shared: Sequence[UUID] = (),
) -> MemoryView | None:
    """``shared``: ids shared into the caller's scope (visible whatever their namespace)."""
    row = conn.execute(
        SQL(
            "SELECT " + _COLUMNS + " FROM {s}.memory_objects m"
            " WHERE id = %s AND (namespace = ANY(%s) OR id = ANY(%s)) AND NOT " + HIDDEN
        ).format(s=Identifier(schema)),
        (memory_id, list(scope), list(shared)),
    ).fetchone()
    return None if row is None else to_view(row)


class HistoryScope(msgspec.Struct, frozen=True, kw_only=True):
    """Which versions of a chain a caller sees. Everyone: ``scope`` (its namespace and
    ancestors) and ``shared`` ids, as ``read`` does, never a ``HIDDEN`` one. Compliance
    staff also look down ``subtree``; reviewers (``quarantined``), who settle disputes
    there, see its quarantined memories (and the tombstones of those erased) too."""

    scope: tuple[str, ...]
    shared: tuple[UUID, ...] = ()
    subtree: str | None = None
    quarantined: bool = False


_HISTORY = """
WITH RECURSIVE chain(id) AS (
    SELECT %(id)s::uuid
    UNION
    SELECT CASE WHEN e.old_id = c.id THEN e.new_id ELSE e.old_id END
      FROM chain c JOIN {s}.memory_supersedence e ON e.old_id = c.id OR e.new_id = c.id
)
SELECT m.id, m.content, m.status, m.trust_tier, m.recorded_at, m.retired_at, m.valid_from,
       m.valid_to, e.new_id AS superseded_by, e.kind, e.reason, e.at
  FROM chain c
  JOIN {s}.memory_objects m ON m.id = c.id
  LEFT JOIN {s}.memory_supersedence e ON e.old_id = m.id
 WHERE ((m.namespace = ANY(%(scope)s) OR m.id = ANY(%(shared)s)) AND NOT {hidden})
    OR ({below} AND (NOT {hidden} OR %(quarantined)s))
 ORDER BY m.recorded_at, m.id, e.at
"""


def history(
    conn: Connection[Any], schema: str, seen: HistoryScope, memory_id: UUID
) -> list[HistoryStep] | None:
    """The whole supersedence chain through a memory, both directions, oldest first; the
    versions ``seen`` hides are left out, and None when it hides the memory itself."""
    below: Composable = SQL("FALSE")
    params: dict[str, Any] = {}
    if seen.subtree is not None:
        below, params = in_subtree("m.namespace", seen.subtree)
    params |= {
        "id": memory_id,
        "scope": list(seen.scope),
        "shared": list(seen.shared),
        "quarantined": seen.quarantined,
    }
    rows = conn.execute(
        SQL(_HISTORY).format(s=Identifier(schema), below=below, hidden=SQL(HIDDEN)), params
    ).fetchall()
    steps = [msgspec.convert(row, HistoryStep) for row in rows]
    return steps if any(step.id == memory_id for step in steps) else None


class StatementView(msgspec.Struct, frozen=True, kw_only=True):
    """A memory as a reviewer sees it beside a queue item: what it says, who wrote it, on
    what authority and when."""

    id: UUID
    namespace: str
    content: str | None
    """None once erased."""
    actor: str
    trust_tier: str
    provenance: list[ProvenanceView]
    recorded_at: datetime
    status: str


def statements(
    conn: Connection[Any], schema: str, ids: Sequence[UUID], root: str, ancestors: Sequence[str]
) -> dict[UUID, StatementView]:
    """The memories among ``ids`` that a reviewer of ``root``'s subtree may see: those in the
    subtree, and those of ``ancestors`` (which the subtree's agents read as their own)."""
    below, params = in_subtree("m.namespace", root)
    rows = conn.execute(
        SQL(
            "SELECT m.id, m.namespace, m.content, m.actor, m.trust_tier, m.provenance, m.recorded_at,"
            " m.status FROM {s}.memory_objects m WHERE m.id = ANY(%(ids)s)"
            " AND (m.namespace = ANY(%(ancestors)s) OR {below})"
        ).format(s=Identifier(schema), below=below),
        {**params, "ids": list(ids), "ancestors": list(ancestors)},
    ).fetchall()
    return {row["id"]: msgspec.convert(row, StatementView) for row in rows}
