"""Queries over the governance read models.

Listings over a subtree (keys, audit) match the root exactly or its strict descendants
with an escaped, ``/``-anchored LIKE pattern; per-memory visibility through shares is
an enumerated, bound array of the caller's scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Composable, Identifier

from memwarden.domain.model.identity import HUMAN_ROLES
from memwarden.domain.model.namespaces import subtree_like_pattern
from memwarden.domain.model.trust import default_provenance_cap
from memwarden.projections.listing import Listed, ListedTable, ListQuery, page
from memwarden.projections.visibility import current


class KeyView(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    namespace: str
    actor: str
    role: str
    issued_by: str
    issued_at: datetime
    revoked: bool
    revoked_at: datetime | None
    max_provenance: str
    """The highest provenance the key may claim (its role's default when it was made without one)."""


class AuditView(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    time: datetime
    actor: str
    namespace: str
    role: str
    op: str
    outcome: str
    detail: str
    subject_ids: list[UUID]


class AuditFilter(msgspec.Struct, frozen=True, kw_only=True):
    since: datetime | None = None
    until: datetime | None = None
    actor: str | None = None
    op: str | None = None
    outcome: str | None = None
    after: int = 0
    before: int | None = None
    """Newest first: only records before this position (the last one of the previous page)."""
    upto: int | None = None
    """Only records at or before this position: a walk's pages all read one snapshot, so
    the records the walk itself adds (each page is audited) never extend it."""
    limit: int = 100
    newest: bool = False


class ScopeCounts(msgspec.Struct, frozen=True, kw_only=True):
    current: int
    disputed: int
    retired: int
    erased: int
    shared_in: int
    pinned: int
    open_disputes: int
    fault_hit_rate: float | None = None
    """Share of the namespace's faults answered (L2 or L3); None before the first fault."""


_SUBTREE = "(namespace = %(root)s OR namespace LIKE %(pattern)s ESCAPE '\\')"


KEYS_PROJECTION = "keys"
"""The name the keys projection (``api_keys``) tracks its position under."""
KEYS = ListedTable(
    table="api_keys",
    columns=KeyView.__struct_fields__,
    time="issued_at",
    key="key_id",
    key_is_uuid=False,
)


def key_view(row: dict[str, Any]) -> KeyView:
    cap = row["max_provenance"] or default_provenance_cap(row["role"] in HUMAN_ROLES)
    return msgspec.convert({**row, "max_provenance": cap}, KeyView)


def list_keys(conn: Connection[Any], schema: str, root: str, query: ListQuery) -> Listed[KeyView]:
    """One page of the keys of ``root``'s subtree."""
    return page(conn, schema, KEYS, root, query, key_view)


def key_tenants(conn: Connection[Any], schema: str) -> list[str]:
    """The tenants that hold at least one key (revoked or not)."""
    rows = conn.execute(
        SQL(
            "SELECT DISTINCT split_part(namespace, '/', 1) AS tenant FROM {}.api_keys ORDER BY tenant"
        ).format(Identifier(schema))
    ).fetchall()
    return [row["tenant"] for row in rows]


def list_audit(conn: Connection[Any], schema: str, root: str, where: AuditFilter) -> list[AuditView]:
    """Audit records of ``root``'s subtree, in ledger order (or newest first), after (or
    before) a position: keyset paging on the position, stable while records are appended."""
    conditions: list[Composable] = [SQL(_SUBTREE), SQL("position > %(after)s")]
    for field, clause in (
        ("since", "time >= %(since)s"),
        ("until", "time < %(until)s"),
        ("actor", "actor = %(actor)s"),
        ("op", "op = %(op)s"),
        ("outcome", "outcome = %(outcome)s"),
        ("upto", "position <= %(upto)s"),
        ("before", "position < %(before)s"),
    ):
        if getattr(where, field) is not None:
            conditions.append(SQL(clause))
    params = {
        **msgspec.structs.asdict(where),
        "root": root,
        "pattern": subtree_like_pattern(root),
    }
    rows = conn.execute(
        SQL(
            "SELECT position, time, actor, namespace, role, op, outcome, detail, subject_ids"
            " FROM {s}.audit_records WHERE {c} ORDER BY position {o} LIMIT %(limit)s"
        ).format(
            s=Identifier(schema), c=SQL(" AND ").join(conditions), o=SQL("DESC" if where.newest else "ASC")
        ),
        params,
    ).fetchall()
    return [msgspec.convert(row, AuditView) for row in rows]


def shared_into(
    conn: Connection[Any], schema: str, scope: Sequence[str], memory_ids: Sequence[UUID] | None = None
) -> list[UUID]:
    """Which of ``memory_ids`` (all, when None) are shared with a namespace of the scope."""
    only = SQL("") if memory_ids is None else SQL(" AND memory_id = ANY(%s)")
    rows = conn.execute(
        SQL("SELECT DISTINCT memory_id FROM {s}.shares WHERE namespace = ANY(%s){only}").format(
            s=Identifier(schema), only=only
        ),
        (list(scope),) if memory_ids is None else (list(scope), list(memory_ids)),
    ).fetchall()
    return [row["memory_id"] for row in rows]


def scope_counts(conn: Connection[Any], schema: str, scope: Sequence[str], namespace: str) -> ScopeCounts:
    s = Identifier(schema)
    row = conn.execute(
        SQL(
            "SELECT"
            f" count(*) FILTER (WHERE {current()}) AS current,"
            " count(*) FILTER (WHERE status = 'disputed') AS disputed,"
            " count(*) FILTER (WHERE status = 'retired') AS retired,"
            " count(*) FILTER (WHERE status = 'erased') AS erased"
            " FROM {s}.memory_objects WHERE namespace = ANY(%s)"
        ).format(s=s),
        (list(scope),),
    ).fetchone()
    assert row is not None
    extra = conn.execute(
        SQL(
            "SELECT (SELECT count(DISTINCT memory_id) FROM {s}.shares WHERE namespace = ANY(%(scope)s))"
            " AS shared_in,"
            " (SELECT count(*) FROM {s}.pins WHERE namespace = %(ns)s) AS pinned,"
            " (SELECT count(*) FROM {s}.disputes WHERE status = 'open' AND"
            "   (namespace = %(ns)s OR namespace LIKE %(pattern)s ESCAPE '\\')) AS open_disputes,"
            " (SELECT avg(CASE WHEN tier = 'miss' THEN 0.0 ELSE 1.0 END) FROM {s}.context_faults"
            "   WHERE namespace = %(ns)s)::float8 AS fault_hit_rate"
        ).format(s=s),
        {"scope": list(scope), "ns": namespace, "pattern": subtree_like_pattern(namespace)},
    ).fetchone()
    assert extra is not None
    return ScopeCounts(**{**row, **extra})
