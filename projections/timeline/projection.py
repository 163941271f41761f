"""``memory_timeline``: one row per (memory, interval of system time) in which its
standing (status, trust tier, validity) held, and ``ledger_clock``: the positions where
the ledger's running maximum of ``at`` rises, so a time maps to a position by index.

An interval is opened by the event (position ``opened``, time ``sys_from``) that gave the
memory this standing and closed by the next event that changed it (``closed``,
``sys_to``; null while it still holds). Known at position P = ``opened <= P < closed``.
The rule that maps a time T to P is in domain/model/asof.py; content is never kept here
(it stays in ``memory_objects``, where erasure removes it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.sql import SQL, Composed, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.asof import Standing, evolve_standing, is_erasure, is_memory_event
from memwarden.projections.sanitize import sanitized


class _Open:
    """An interval being built in this batch (or loaded open from the table)."""

    __slots__ = ("closed", "memory_id", "new", "opened", "standing", "sys_from", "sys_to")

    def __init__(
        self, memory_id: UUID, standing: Standing, opened: int, sys_from: datetime, *, new: bool
    ) -> None:
        self.memory_id = memory_id
        self.standing = standing
        self.opened = opened
        self.sys_from = sys_from
        self.closed: int | None = None
        self.sys_to: datetime | None = None
        self.new = new


class TimelineProjection:
    name = "memory_timeline"
    tables = ("memory_timeline", "ledger_clock")

    def create(self, curs: Cursor[Any], schema: str) -> None:
        for statement in _schema_sql(schema):
            curs.execute(statement)

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events)
        s = Identifier(schema)
        self._clock(curs, s, events)
        memory_events = [r for r in events if is_memory_event(r.event) or is_erasure(r.event)]
        if not memory_events:
            return
        current = self._load_open(curs, s, memory_events)
        closes: list[_Open] = []
        created: list[tuple[UUID, _Open]] = []
        for recorded in memory_events:
            memory_id: UUID | None = getattr(recorded.event, "memory_id", None)
            if memory_id is None:
                continue
            before = current.get(memory_id)
            position = int(recorded.position or 0)
            if before is not None and position <= before.opened:
                continue  # applied already (a replay over existing rows stays idempotent)
            after = evolve_standing(before.standing if before else None, recorded.event)
            if after is None or (before is not None and after == before.standing):
                continue
            if before is not None:
                before.closed, before.sys_to = position, recorded.event.at
                if not before.new:
                    closes.append(before)
            interval = _Open(memory_id, after, position, recorded.event.at, new=True)
            current[memory_id] = interval
            created.append((memory_id, interval))
        self._close(curs, s, closes)
        self._insert(curs, s, created)

    def _clock(self, curs: Cursor[Any], s: Identifier, events: list[Recorded]) -> None:
        """Keep the events that raise the batch's running high; the statement keeps those
        above the table's high too (together: above every earlier event). One round trip."""
        high: datetime | None = None
        positions: list[int] = []
        times: list[datetime] = []
        for recorded in events:
            at = recorded.event.at
            if high is None or at > high:
                high = at
                positions.append(int(recorded.position or 0))
                times.append(at)
        if positions:
            curs.execute(
                SQL(
                    "INSERT INTO {s}.ledger_clock (position, at)"
                    " SELECT u.position, u.at FROM unnest(%b::bigint[], %b::timestamptz[]) AS u(position, at)"
                    " WHERE u.at > coalesce((SELECT max(at) FROM {s}.ledger_clock), '-infinity')"
                    " ON CONFLICT DO NOTHING"
                ).format(s=s),
                (positions, times),
            )

    def _load_open(self, curs: Cursor[Any], s: Identifier, events: list[Recorded]) -> dict[UUID, _Open]:
        ids = list({getattr(r.event, "memory_id", None) for r in events} - {None})
        rows = curs.execute(
            SQL(
                "SELECT memory_id, namespace, status, trust_tier, recorded_at, valid_from, valid_to,"
                " retired_at, opened, sys_from FROM {s}.memory_timeline"
                " WHERE memory_id = ANY(%s) AND closed IS NULL"
            ).format(s=s),
            (ids,),
        ).fetchall()
        return {
            row["memory_id"]: _Open(
                row["memory_id"],
                Standing(
                    namespace=row["namespace"],
                    status=row["status"],
                    trust_tier=row["trust_tier"],
                    recorded_at=row["recorded_at"],
                    valid_from=row["valid_from"],
                    valid_to=row["valid_to"],
                    retired_at=row["retired_at"],
                ),
                int(row["opened"]),
                row["sys_from"],
                new=False,
            )
            for row in rows
        }

    def _close(self, curs: Cursor[Any], s: Identifier, closes: list[_Open]) -> None:
        if not closes:
            return
        curs.execute(
            SQL(
                "UPDATE {s}.memory_timeline t SET closed = c.closed, sys_to = c.sys_to"
                " FROM unnest(%b::uuid[], %b::bigint[], %b::bigint[], %b::timestamptz[])"
                "   AS c(memory_id, opened, closed, sys_to)"
                " WHERE t.memory_id = c.memory_id AND t.opened = c.opened"
            ).format(s=s),
            (
                [i.memory_id for i in closes],
                [i.opened for i in closes],
                [i.closed for i in closes],
                [i.sys_to for i in closes],
            ),
        )

    def _insert(self, curs: Cursor[Any], s: Identifier, created: list[tuple[UUID, _Open]]) -> None:
        if not created:
            return
        columns: list[list[Any]] = [[] for _ in range(12)]
        for memory_id, i in created:
            st = i.standing
            values = (
                memory_id,
                st.namespace,
                st.status,
                st.trust_tier,
                st.recorded_at,
                st.valid_from,
                st.valid_to,
                st.retired_at,
                i.opened,
                i.closed,
                i.sys_from,
                i.sys_to,
            )
            for column, value in zip(columns, values, strict=True):
                column.append(value)
        curs.execute(
            SQL(
                "INSERT INTO {s}.memory_timeline (memory_id, namespace, status, trust_tier, recorded_at,"
                " valid_from, valid_to, retired_at, opened, closed, sys_from, sys_to)"
                " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::timestamptz[],"
                " %b::timestamptz[], %b::timestamptz[], %b::timestamptz[], %b::bigint[], %b::bigint[],"
                " %b::timestamptz[], %b::timestamptz[]) ON CONFLICT DO NOTHING"
            ).format(s=s),
            columns,
        )


def _schema_sql(schema: str) -> list[Composed]:
    s = Identifier(schema)
    return [
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.memory_timeline (
    memory_id uuid NOT NULL,
    namespace text NOT NULL,
    status text NOT NULL,
    trust_tier text NOT NULL,
    recorded_at timestamptz NOT NULL,
    valid_from timestamptz NOT NULL,
    valid_to timestamptz,
    retired_at timestamptz,
    opened bigint NOT NULL,
    closed bigint,
    sys_from timestamptz NOT NULL,
    sys_to timestamptz,
    PRIMARY KEY (memory_id, opened)
)""").format(s=s),
        # as known at P: the believed intervals of a namespace opened by P (closed after P)
        SQL(
            "CREATE INDEX IF NOT EXISTS memory_timeline_asof ON {s}.memory_timeline"
            " (namespace, opened) INCLUDE (closed, valid_from, valid_to)"
            " WHERE status = 'active' AND retired_at IS NULL"
        ).format(s=s),
        # the open interval of a memory (the projection's own lookups)
        SQL(
            "CREATE INDEX IF NOT EXISTS memory_timeline_open ON {s}.memory_timeline (memory_id)"
            " WHERE closed IS NULL"
        ).format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.ledger_clock (
    position bigint PRIMARY KEY,
    at timestamptz NOT NULL
)""").format(s=s),
        SQL("CREATE INDEX IF NOT EXISTS ledger_clock_at ON {s}.ledger_clock (at)").format(s=s),
    ]
