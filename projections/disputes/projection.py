"""The ``disputes`` read model: open and resolved disputes for reviewers."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import DisputeOpened, DisputeResolved, MemoryErased
from memwarden.projections.sanitize import sanitized


class DisputesProjection:
    name = "disputes"
    tables = ("disputes",)

    def create(self, curs: Cursor[Any], schema: str) -> None:
        s = Identifier(schema)
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.disputes (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    memory_id uuid NOT NULL,
    incumbent_id uuid NOT NULL,
    reason text NOT NULL,
    status text NOT NULL,
    decision text,
    reviewer text,
    resolution_reason text,
    replacement_id uuid,
    opened_at timestamptz NOT NULL,
    resolved_at timestamptz,
    position bigint NOT NULL
)""").format(s=s)
        )
        curs.execute(
            SQL(
                "CREATE INDEX IF NOT EXISTS disputes_open ON {s}.disputes (namespace) WHERE status = 'open'"
            ).format(s=s)
        )
        curs.execute(
            SQL("CREATE INDEX IF NOT EXISTS disputes_order ON {s}.disputes (opened_at, id)").format(s=s)
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, (DisputeOpened, DisputeResolved, MemoryErased))
        s = Identifier(schema)
        erased = [r.event.memory_id for r in events if isinstance(r.event, MemoryErased)]
        for r in events:
            e = r.event
            if isinstance(e, DisputeOpened):
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.disputes (id, namespace, memory_id, incumbent_id, reason, status,"
                        " opened_at, position) VALUES (%s, %s, %s, %s, %s, 'open', %s, %s)"
                        " ON CONFLICT (id) DO NOTHING"
                    ).format(s=s),
                    (e.dispute_id, e.namespace, e.memory_id, e.incumbent_id, e.reason, e.at, r.position),
                )
            elif isinstance(e, DisputeResolved):
                curs.execute(
                    SQL(
                        "UPDATE {s}.disputes SET status = 'resolved', decision = %s, reviewer = %s,"
                        " resolution_reason = %s, replacement_id = %s, resolved_at = %s, position = %s"
                        " WHERE id = %s"
                    ).format(s=s),
                    (e.decision, e.reviewer, e.reason, e.replacement_id, e.at, r.position, e.dispute_id),
                )
        if erased:  # a reviewer's free text about an erased memory goes with it
            curs.execute(
                SQL(
                    "UPDATE {s}.disputes SET resolution_reason = NULL WHERE resolution_reason IS NOT NULL"
                    " AND (memory_id = ANY(%(ids)s) OR incumbent_id = ANY(%(ids)s)"
                    " OR replacement_id = ANY(%(ids)s))"
                ).format(s=s),
                {"ids": erased},
            )
