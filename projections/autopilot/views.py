"""Queries over the ``autopilot`` read model for reviewers (their subtree) and ``stats``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.projections.listing import ListedTable
from memwarden.projections.scopes import in_subtree
from memwarden.projections.visibility import current


class FindingView(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    memory_a: UUID
    memory_b: UUID
    judge: str
    rule: str
    explanation: str
    cosine: float
    group_id: UUID
    """The newer statement's id: the findings about one statement share it, so a reviewer's
    list can show one row per statement (domain/model/autopilot.py ``finding_group``)."""
    status: str
    decision: str | None
    reviewer: str | None
    resolution_reason: str | None
    opened_at: datetime
    resolved_at: datetime | None


class DecisionView(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    winner: UUID
    loser: UUID
    judge: str
    rule: str
    explanation: str
    dial: str
    status: str
    reviewer: str | None
    overturn_reason: str | None
    restored: UUID | None
    settled_at: datetime
    overturned_at: datetime | None


class ProposalView(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    kind: str
    sources: list[UUID]
    canonical: UUID
    drafter: str
    fallback: str | None = None
    """Why the model drafter did not draft it, when one is configured."""
    status: str
    edited: bool
    reviewer: str | None
    document_id: UUID | None
    drafted_at: datetime
    reviewed_at: datetime | None


class AutopilotCounts(msgspec.Struct, frozen=True, kw_only=True):
    open_findings: int
    unjudged: int
    open_proposals: int = 0


DISPATCH_TRACKING_TABLE = "worker_tracking"
"""The dispatchers' own tracking records (workers/dispatcher.py), read here for metrics."""


class WorkerGauges(msgspec.Struct, frozen=True, kw_only=True):
    dispatch_positions: dict[str, int]
    judged: dict[str, int]
    """Memories by their latest pass outcome (judged, judge_unavailable, unembedded ...)."""
    unjudged: int
    open_findings: int
    lease_takeovers: int
    drafts: dict[tuple[str, str], int] = msgspec.field(default_factory=dict)
    """Proposals by drafter and fallback ("" for none)."""


_UNJUDGED = (
    f"{current('m')}"
    " AND NOT EXISTS (SELECT 1 FROM {s}.autopilot_judged j WHERE j.memory_id = m.id"
    " AND j.outcome IN ('judged', 'not_current'))"
)
"""A current memory (``m``) that no pass has judged for good: what ``unjudged`` counts."""

FINDINGS = ListedTable(
    table="findings",
    columns=FindingView.__struct_fields__,
    time="opened_at",
    rule="rule",
    memories="ARRAY[t.memory_a, t.memory_b]",
    group="group_id",
)
DECISIONS = ListedTable(
    table="autopilot_decisions",
    columns=DecisionView.__struct_fields__,
    time="settled_at",
    rule="rule",
    memories="ARRAY[t.winner, t.loser]",
)
PROPOSALS = ListedTable(
    table="proposals",
    columns=ProposalView.__struct_fields__,
    time="drafted_at",
    rule="kind",
    memories="t.sources",
)
"""The reviewers' queues; a proposal's ``rule`` is its kind (merge, summary ...)."""


def autopilot_counts(conn: Connection[Any], schema: str, scope: Sequence[str], root: str) -> AutopilotCounts:
    """Open findings in ``root``'s subtree; current memories in ``scope`` the autopilot has
    not judged (not yet, judge unavailable, no vector to find neighbours by)."""
    s = Identifier(schema)
    subtree, params = in_subtree("namespace", root)
    findings = conn.execute(
        SQL("SELECT count(*) AS n FROM {s}.findings WHERE status = 'open' AND {w}").format(s=s, w=subtree),
        params,
    ).fetchone()
    proposals = conn.execute(
        SQL("SELECT count(*) AS n FROM {s}.proposals WHERE status = 'pending_review' AND {w}").format(
            s=s, w=subtree
        ),
        params,
    ).fetchone()
    unjudged = conn.execute(
        SQL(
            "SELECT count(*) AS n FROM {s}.memory_objects m WHERE m.namespace = ANY(%(scope)s) AND "
            + _UNJUDGED
        ).format(s=s),
        {"scope": list(scope)},
    ).fetchone()
    return AutopilotCounts(
        open_findings=int(findings["n"]) if findings else 0,
        unjudged=int(unjudged["n"]) if unjudged else 0,
        open_proposals=int(proposals["n"]) if proposals else 0,
    )


def dispatch_positions(conn: Connection[Any], schema: str) -> dict[str, int]:
    """How far each dispatcher has handed on the ledger (none before a worker first ran)."""
    exists = conn.execute("SELECT to_regclass(%s) AS t", (f"{schema}.{DISPATCH_TRACKING_TABLE}",)).fetchone()
    if exists is None or exists["t"] is None:
        return {}
    rows = conn.execute(
        SQL("SELECT name, position FROM {s}.{t}").format(
            s=Identifier(schema), t=Identifier(DISPATCH_TRACKING_TABLE)
        )
    ).fetchall()
    return {row["name"]: int(row["position"]) for row in rows}


def worker_gauges(conn: Connection[Any], schema: str) -> WorkerGauges:
    """The autopilot's figures over the whole deployment, for ``/metrics``."""
    s = Identifier(schema)
    positions = dispatch_positions(conn, schema)
    judged = {
        row["outcome"]: int(row["n"])
        for row in conn.execute(
            SQL("SELECT outcome, count(*) AS n FROM {s}.autopilot_judged GROUP BY outcome").format(s=s)
        ).fetchall()
    }
    row = conn.execute(
        SQL(
            "SELECT (SELECT count(*) FROM {s}.memory_objects m WHERE " + _UNJUDGED + ") AS unjudged,"
            " (SELECT count(*) FROM {s}.findings WHERE status = 'open') AS open_findings,"
            " (SELECT coalesce(sum(takeovers), 0) FROM {s}.autopilot_leases) AS takeovers"
        ).format(s=s)
    ).fetchone()
    assert row is not None
    drafts = {
        (d["drafter"], d["fallback"] or ""): int(d["n"])
        for d in conn.execute(
            SQL(
                "SELECT drafter, fallback, count(*) AS n FROM {s}.proposals GROUP BY drafter, fallback"
            ).format(s=s)
        ).fetchall()
    }
    return WorkerGauges(
        drafts=drafts,
        dispatch_positions=positions,
        judged=judged,
        unjudged=int(row["unjudged"]),
        open_findings=int(row["open_findings"]),
        lease_takeovers=int(row["takeovers"]),
    )


def unjudged_memories(
    conn: Connection[Any], schema: str, recorded_before: datetime, limit: int
) -> list[tuple[UUID, int]]:
    """Current memories recorded before ``recorded_before`` that no pass has judged (left
    ``judge_unavailable`` or ``unembedded``, or never reached), oldest first, with their
    positions: what a sweep hands to the autopilot again."""
    return _unjudged(conn, schema, "m.recorded_at < %s", (recorded_before,), limit)


def pending_memories(
    conn: Connection[Any], schema: str, namespace: str, recorded_since: datetime, limit: int
) -> list[tuple[UUID, int]]:
    """A namespace's current memories recorded since ``recorded_since`` that no pass has
    judged for good, oldest first, with their positions: what a pass holding the
    namespace's lease judges along with its own (the window keeps the scan to the recent
    end of the namespace's index; older ones are the sweep's)."""
    return _unjudged(
        conn, schema, "m.namespace = %s AND m.recorded_at >= %s", (namespace, recorded_since), limit
    )


def _unjudged(
    conn: Connection[Any], schema: str, where: str, params: tuple[Any, ...], limit: int
) -> list[tuple[UUID, int]]:
    rows = conn.execute(
        SQL(
            "SELECT m.id, m.position FROM {s}.memory_objects m WHERE "
            + where
            + " AND "
            + _UNJUDGED
            + " ORDER BY m.recorded_at, m.id LIMIT %s"
        ).format(s=Identifier(schema)),
        (*params, limit),
    ).fetchall()
    return [(row["id"], int(row["position"])) for row in rows]


def namespace_memories(conn: Connection[Any], schema: str, namespace: str, limit: int) -> list[UUID]:
    """The ids of a namespace's memories that are not erased (current first, then newest):
    what a consolidation pass clusters."""
    rows = conn.execute(
        SQL(
            "SELECT m.id FROM {s}.memory_objects m WHERE m.namespace = %s AND m.status <> 'erased'"
            " ORDER BY (m.retired_at IS NULL) DESC, m.recorded_at DESC, m.id LIMIT %s"
        ).format(s=Identifier(schema)),
        (namespace, limit),
    ).fetchall()
    return [row["id"] for row in rows]


def namespace_faults(conn: Connection[Any], schema: str, namespace: str, limit: int) -> list[UUID]:
    """The ids of a namespace's newest faults: what a consolidation pass reads (from the
    ledger) for facts faulted together and near-misses."""
    rows = conn.execute(
        SQL(
            "SELECT f.fault_id FROM {s}.context_faults f WHERE f.namespace = %s"
            " ORDER BY f.position DESC LIMIT %s"
        ).format(s=Identifier(schema)),
        (namespace, limit),
    ).fetchall()
    return [row["fault_id"] for row in rows]
