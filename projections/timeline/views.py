"""As-of queries over ``memory_timeline`` (indexed SQL), always inside the caller's scope.

The scope is an enumerated list of namespaces (an agent's own and its ancestors), bound as
one array, or a subtree (compliance), matched by its root and an escaped, ``/``-anchored
LIKE pattern. Content comes from ``memory_objects``: erasure nulls it there,
so an erased memory is a tombstone at every instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Composable, Composed, Identifier

from memwarden.domain.model.asof import AsOfMemory
from memwarden.domain.model.scopes import Subtree
from memwarden.projections.scopes import in_subtree
from memwarden.projections.visibility import current, in_effect, known_at


def position_at(conn: Connection[Any], schema: str, as_of: datetime, cap: int) -> int:
    """``position(T)`` (domain/model/asof.py), at most ``cap``: the first position whose
    ``at`` exceeds the running maximum past T, minus one."""
    row = conn.execute(
        SQL("SELECT position FROM {s}.ledger_clock WHERE at > %s ORDER BY at LIMIT 1").format(
            s=Identifier(schema)
        ),
        (as_of,),
        prepare=True,
    ).fetchone()
    if row is None:
        return cap
    return min(int(row["position"]) - 1, cap)


def _within(scope: Sequence[str] | Subtree) -> tuple[Composable, dict[str, Any]]:
    """The condition on ``t.namespace`` and its parameters: an enumerated list bound as one
    array, or a subtree as its root plus an escaped LIKE pattern anchored on ``/``."""
    if isinstance(scope, Subtree):
        return in_subtree("t.namespace", scope.root)
    return SQL("t.namespace = ANY(%(scope)s)"), {"scope": list(scope)}


def as_of_memories(
    conn: Connection[Any],
    schema: str,
    scope: Sequence[str] | Subtree,
    position: int,
    valid_at: datetime,
    query: str | None = None,
    limit: int | None = None,
    after: UUID | None = None,
) -> list[AsOfMemory]:
    """The memories believed at ``position`` that hold at ``valid_at``, ordered by id."""
    s = Identifier(schema)
    within, params = _within(scope)
    params |= {
        "p": position,
        "v": valid_at,
        "after": after or UUID(int=0),
        "limit": limit,
    }
    terms: list[Composed] = []
    for n, term in enumerate((query or "").lower().split()):
        params[f"t{n}"] = term
        terms.append(SQL(" AND strpos(lower(m.content), %({})s) > 0").format(SQL(f"t{n}")))
    rows = conn.execute(
        SQL(
            "SELECT t.memory_id AS id, t.namespace, m.content, t.status, t.trust_tier, t.recorded_at,"
            " t.valid_from, t.valid_to, t.retired_at"
            " FROM {s}.memory_timeline t LEFT JOIN {s}.memory_objects m ON m.id = t.memory_id"
            f" WHERE {{within}} AND {current('t', '%(v)s', started=True)} AND {known_at('t', '%(p)s')}"
            " AND t.memory_id > %(after)s{terms}"
            " ORDER BY t.memory_id LIMIT %(limit)s"
        ).format(s=s, within=within, terms=SQL("").join(terms)),
        params,
    ).fetchall()
    return [msgspec.convert(row, AsOfMemory) for row in rows]


def memory_at(
    conn: Connection[Any],
    schema: str,
    scope: Sequence[str],
    memory_id: UUID,
    position: int,
    valid_at: datetime | None,
) -> AsOfMemory | None:
    """One memory as the system knew it at ``position`` (any status but quarantined; never
    the tombstone of a memory erased while quarantined, which no read ever showed), and,
    with ``valid_at``, only if it held in the world then. Out of scope = missing."""
    validity = SQL("")
    if valid_at is not None:
        validity = SQL(f" AND {in_effect('t', '%(v)s')}")
    row = conn.execute(
        SQL(
            "SELECT t.memory_id AS id, t.namespace, m.content, t.status, t.trust_tier, t.recorded_at,"
            " t.valid_from, t.valid_to, t.retired_at"
            " FROM {s}.memory_timeline t LEFT JOIN {s}.memory_objects m ON m.id = t.memory_id"
            " WHERE t.memory_id = %(id)s AND t.namespace = ANY(%(scope)s) AND t.status <> 'disputed'"
            " AND m.erased_in_quarantine IS NOT TRUE"
            f" AND {known_at('t', '%(p)s')}{{validity}}"
        ).format(s=Identifier(schema), validity=validity),
        {"id": memory_id, "scope": list(scope), "p": position, "v": valid_at},
    ).fetchone()
    return None if row is None else msgspec.convert(row, AsOfMemory)
