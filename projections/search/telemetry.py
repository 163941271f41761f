"""Access telemetry, derived from the ledger's records of reads: capsules issued (last
used, use count) and context faults (fault count of the best L2 candidate, fault tiers
for the hit rate). Rebuilt by a replay like every other read model."""

from __future__ import annotations

from collections import Counter
from typing import Any

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import CapsuleIssued, ContextFaulted, MemoryErased
from memwarden.projections.sanitize import sanitized


class AccessProjection:
    name = "access"
    tables = ("memory_access", "context_faults")

    def create(self, curs: Cursor[Any], schema: str) -> None:
        s = Identifier(schema)
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.memory_access (
    memory_id uuid PRIMARY KEY,
    last_used timestamptz,
    use_count int NOT NULL DEFAULT 0,
    fault_count int NOT NULL DEFAULT 0
)""").format(s=s)
        )
        curs.execute(
            SQL("CREATE INDEX IF NOT EXISTS memory_access_recent ON {s}.memory_access (last_used)").format(
                s=s
            )
        )
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.context_faults (
    fault_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    actor text NOT NULL,
    tier text NOT NULL,
    score float8 NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL
)""").format(s=s)
        )
        curs.execute(
            SQL(
                "CREATE INDEX IF NOT EXISTS context_faults_namespace ON {s}.context_faults (namespace)"
            ).format(s=s)
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, (CapsuleIssued, ContextFaulted, MemoryErased))
        s = Identifier(schema)
        for r in events:
            e = r.event
            if isinstance(e, CapsuleIssued) and e.refs:
                uses = Counter(e.refs)
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.memory_access AS a (memory_id, last_used, use_count)"
                        " SELECT * FROM unnest(%s::uuid[], %s::timestamptz[], %s::int[])"
                        " ON CONFLICT (memory_id) DO UPDATE SET use_count = a.use_count + excluded.use_count,"
                        " last_used = greatest(a.last_used, excluded.last_used)"
                    ).format(s=s),
                    (list(uses), [e.at] * len(uses), list(uses.values())),
                )
            elif isinstance(e, ContextFaulted):
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.context_faults (fault_id, namespace, actor, tier, score, at, position)"
                        " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (fault_id) DO NOTHING RETURNING fault_id"
                    ).format(s=s),
                    (e.fault_id, e.namespace, e.actor, e.tier, e.score, e.at, r.position),
                )
                fresh = curs.fetchone() is not None
                if fresh and e.tier != "L2" and e.best_candidate is not None:
                    curs.execute(
                        SQL(
                            "INSERT INTO {s}.memory_access AS a (memory_id, fault_count) VALUES (%s, 1)"
                            " ON CONFLICT (memory_id) DO UPDATE SET fault_count = a.fault_count + 1"
                        ).format(s=s),
                        (e.best_candidate,),
                    )
            elif isinstance(e, MemoryErased):
                curs.execute(
                    SQL("DELETE FROM {s}.memory_access WHERE memory_id = %s").format(s=s), (e.memory_id,)
                )
