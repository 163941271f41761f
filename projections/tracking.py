"""Tracking records: which ledger position each projection's tables reflect, and where a
projection stopped.

A tracking record moves in the same transaction as the rows it vouches for, so a read
model always knows exactly which position it reflects. This is the one place that reads
or writes the two tables; the runner applies batches with it and a rebuild switches with
it, neither spelling the SQL out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType

from psycopg import Connection, Cursor
from psycopg.sql import SQL, Identifier

TRACKING_TABLE = "projection_tracking"
ERRORS_TABLE = "projection_errors"
"""Where a runner records the event a projection stopped at, so every process (an API
process beside a projector, the CLI) reports it, not only the one that hit it."""


def projected_channel(schema: str) -> str:
    """Where a runner announces, at each batch's commit, the position every projection has
    reached (and where the API processes listen for it)."""
    return f"{schema}_projected"


Position = NewType("Position", int)
"""A position in the ledger's notification log; 0 is before the first event."""


@dataclass(frozen=True, slots=True)
class Stop:
    """A projection that could not process the event at ``position`` stopped just before
    it (never skipping it); ``error`` says why."""

    position: Position
    error: str


@dataclass(frozen=True, slots=True)
class Applied:
    """What one batch did: the position its projections reached, how many events it read."""

    reached: Position
    events: int


class Tracking:
    """The tracking and stop tables of one schema, their statements rendered once."""

    def __init__(self, schema: str, channel: str) -> None:
        self.channel = channel
        """Announces, at each commit that moved every projection, the position reached."""
        tracking = SQL("{}.{}").format(Identifier(schema), Identifier(TRACKING_TABLE))
        self._tracking = tracking
        self._errors = SQL("{}.{}").format(Identifier(schema), Identifier(ERRORS_TABLE))
        self._positions_sql = (
            SQL("SELECT application_name, notification_id FROM {} WHERE application_name = ANY(%s)")
            .format(tracking)
            .as_string()
        )
        self._reached_sql = (
            SQL("SELECT count(*) AS n FROM {} WHERE application_name = ANY(%s) AND notification_id >= %s")
            .format(tracking)
            .as_string()
        )
        advance = SQL(
            "INSERT INTO {t} (application_name, notification_id)"
            " SELECT name, %s FROM unnest(%s::text[]) AS name"
            " ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id"
            " WHERE {t}.notification_id < EXCLUDED.notification_id"
        ).format(t=tracking)
        self._advance_sql = advance.as_string()
        self._advance_and_announce_sql = (
            SQL("WITH tracked AS ({}) SELECT pg_notify(%s, %s)").format(advance).as_string()
        )

    # -- positions ------------------------------------------------------------------------------

    def positions_in(self, conn: Connection[Any], names: Sequence[str]) -> dict[str, Position]:
        """Each named projection's tracked position (0 if it has no record yet)."""
        rows = conn.execute(self._positions_sql, (list(names),), prepare=True).fetchall()
        found = {row["application_name"]: int(row["notification_id"]) for row in rows}
        return {name: Position(found.get(name, 0)) for name in names}

    def position_of(self, conn: Connection[Any], name: str) -> Position:
        return self.positions_in(conn, [name])[name]

    def all_reached(self, conn: Connection[Any], names: Sequence[str], position: int) -> bool:
        """One query: has every named projection reached ``position``?"""
        row = conn.execute(self._reached_sql, (list(names), position), prepare=True).fetchone()
        return row is not None and int(row["n"]) == len(names)

    def advance(
        self, curs: Cursor[Any], names: Sequence[str], position: Position, *, announce: bool = False
    ) -> None:
        """Record that these projections reflect ``position`` (never moves a record back);
        with ``announce``, the same statement notifies the watchers (at commit)."""
        if announce:
            curs.execute(self._advance_and_announce_sql, (position, list(names), self.channel, str(position)))
        else:
            curs.execute(self._advance_sql, (position, list(names)))

    def reset(self, conn: Connection[Any], name: str, position: Position) -> None:
        """Set the record to exactly ``position``, back or forth: the tables were replaced."""
        conn.execute(SQL("DELETE FROM {} WHERE application_name = %s").format(self._tracking), (name,))
        conn.execute(
            SQL("INSERT INTO {} (application_name, notification_id) VALUES (%s, %s)").format(self._tracking),
            (name, position),
        )

    # -- stops ----------------------------------------------------------------------------------

    def record_stop(self, curs: Cursor[Any], name: str, stop: Stop) -> None:
        """Committed with the batch: the events before the poison one, and the stop itself."""
        curs.execute(
            SQL(
                "INSERT INTO {} (name, position, error) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, error = EXCLUDED.error,"
                " at = now()"
            ).format(self._errors),
            (name, stop.position, stop.error[:2000]),
        )

    def recorded_stops(self, conn: Connection[Any]) -> dict[str, Stop]:
        """Stops recorded by any runner (whether since passed is the caller's question)."""
        rows = conn.execute(SQL("SELECT name, position, error FROM {}").format(self._errors)).fetchall()
        return {row["name"]: Stop(Position(int(row["position"])), str(row["error"])) for row in rows}
