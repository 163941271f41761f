"""Rebuild a projection from position zero beside the live one, then switch.

Uses only the runner's public side: its projections, its ledger, its tracking records
(``ProjectionRunner.tracking``) and ``resume`` for a projection the rebuild carried past
its stop; the switch holds the same advisory lock as a batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger import locks
from memwarden.domain.ledger.database import unavailable
from memwarden.domain.ledger.mapper import Recorded
from memwarden.projections.base import DeferredIndexes, Projection
from memwarden.projections.runner import ProjectionRunner
from memwarden.projections.tracking import Applied, Position

REBUILD_BATCH = 5000


class RebuildFailed(Exception):
    """The rebuilt model could not process an event; the live model was left untouched."""

    def __init__(self, name: str, position: int, error: str) -> None:
        super().__init__(f"rebuild of {name} stopped at position {position}: {error}")
        self.name = name
        self.position = position
        self.error = error


class RebuildReport(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    position: int
    events: int
    seconds: float
    events_per_second: float
    switched: bool
    verified: bool = False
    differences: list[str] = msgspec.field(default_factory=list)


Progress = Callable[[str, int, int], None]
"""Told (projection name, position reached, head) after each rebuilt batch."""


class Rebuilder:
    """Rebuild a projection from position zero into fresh tables in a shadow schema while
    the live tables keep serving, then switch in ONE transaction.

    The switch holds the runners' advisory lock (no batch is applied to the live model
    meanwhile), brings the shadow to the ledger head, optionally compares it with the live
    model brought to the same position, then takes ACCESS EXCLUSIVE locks on the live
    tables, drops them and moves the shadow tables into their place, and sets the tracking
    record. A reader sees the old model or the new one, never a half-built one: readers
    that arrive during the switch wait on the table lock and then read the new tables.
    """

    def __init__(self, runner: ProjectionRunner, batch_size: int = REBUILD_BATCH) -> None:
        self.runner = runner
        self.ledger = runner.ledger
        self.schema = runner.schema
        self.batch_size = batch_size

    def projection(self, name: str) -> Projection:
        return self.runner.projection(name)

    def rebuild(
        self, name: str, *, verify: bool = False, switch: bool = True, progress: Progress | None = None
    ) -> RebuildReport:
        projection = self.projection(name)
        shadow = f"{self.schema}__rebuild_{name}"[:63]
        started = time.perf_counter()
        deferred = self._create_shadow(projection, shadow)
        try:
            with self.ledger.datastore.get_connection() as conn:
                built = self._build(
                    conn, projection, shadow, Position(0), self.ledger.head_position(), progress
                )
                if deferred and isinstance(projection, DeferredIndexes):  # built once, over all rows
                    with conn.transaction(), conn.cursor() as curs:
                        projection.build_indexes(curs, shadow)
                with conn.transaction():
                    locks.hold(conn, locks.PROJECTIONS)
                    more = self._build(
                        conn, projection, shadow, built.reached, self.ledger.head_position(), progress
                    )
                    differences = self._verify(conn, projection, shadow, more.reached) if verify else []
                    if switch:
                        self._switch(conn, projection, shadow, more.reached)
                        self.runner.resume(name)
        finally:
            self._drop_shadow(shadow)
        seconds = time.perf_counter() - started
        events = built.events + more.events
        return RebuildReport(
            name=name,
            position=more.reached,
            events=events,
            seconds=seconds,
            events_per_second=events / seconds if seconds > 0 else 0.0,
            switched=switch,
            verified=verify,
            differences=differences,
        )

    def _create_shadow(self, projection: Projection, shadow: str) -> bool:
        """Fresh tables in an empty shadow schema; True if their deferrable indexes were
        dropped (the whole ledger is ahead of them: built once at the end)."""
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(shadow)))
            curs.execute(SQL("CREATE SCHEMA {}").format(Identifier(shadow)))
            projection.create(curs, shadow)
            return isinstance(projection, DeferredIndexes) and projection.defer_indexes(
                curs, shadow, self.ledger.head_position()
            )

    def _drop_shadow(self, shadow: str) -> None:
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(shadow)))

    def _build(
        self,
        conn: Connection[Any],
        projection: Projection,
        schema: str,
        position: Position,
        head: int,
        progress: Progress | None,
    ) -> Applied:
        """Apply events after ``position`` up to ``head`` to ``schema``; each batch commits
        on its own unless the caller holds a transaction."""
        count = 0
        while position < head:
            events = self.ledger.read(position, self.batch_size, stop=head)
            if not events:
                break
            self._apply_batch(conn, projection, schema, events)
            position = Position(int(events[-1].position or 0))
            count += len(events)
            if progress is not None:
                progress(projection.name, position, head)
        return Applied(position, count)

    def _apply_batch(
        self, conn: Connection[Any], projection: Projection, schema: str, events: list[Recorded]
    ) -> None:
        try:
            with conn.transaction(), conn.cursor() as curs, conn.pipeline():
                projection.apply(curs, schema, events)
        except Exception as error:
            if unavailable(error):  # no event's fault: the rebuild fails as the database did
                raise
            for recorded in events:
                try:
                    with conn.transaction(), conn.cursor() as curs:
                        projection.apply(curs, schema, [recorded])
                except Exception as failure:
                    if unavailable(failure):
                        raise
                    raise RebuildFailed(
                        projection.name, int(recorded.position or 0), f"{type(failure).__name__}: {failure}"
                    ) from failure
            raise

    def _verify(
        self, conn: Connection[Any], projection: Projection, shadow: str, position: Position
    ) -> list[str]:
        """Bring the live model to ``position`` (we hold the runners' lock) and compare."""
        live_position = self.runner.tracking.position_of(conn, projection.name)
        if live_position < position:
            try:
                reached = self._build(conn, projection, self.schema, live_position, position, None).reached
            except RebuildFailed as failed:
                return [f"the live model cannot reach position {position}: {failed}"]
            with conn.cursor() as curs:
                self.runner.tracking.advance(curs, [projection.name], reached)
        found: list[str] = []
        for table in projection.tables:
            found += compare_tables(conn, self.schema, shadow, table)
        return found

    def _switch(self, conn: Connection[Any], projection: Projection, shadow: str, position: Position) -> None:
        live = Identifier(self.schema)
        for table in projection.tables:
            conn.execute(SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(live, Identifier(table)))
        for table in projection.tables:
            conn.execute(SQL("DROP TABLE IF EXISTS {}.{}").format(live, Identifier(table)))
            conn.execute(
                SQL("ALTER TABLE {}.{} SET SCHEMA {}").format(Identifier(shadow), Identifier(table), live)
            )
        self.runner.tracking.reset(conn, projection.name, position)


def compare_tables(conn: Connection[Any], live: str, shadow: str, table: str, sample: int = 5) -> list[str]:
    """Rows in one table and not the other (multiset difference), both ways, with samples."""
    columns_query = (
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
        " ORDER BY ordinal_position"
    )
    rebuilt = [r["column_name"] for r in conn.execute(columns_query, (shadow, table)).fetchall()]
    current = [r["column_name"] for r in conn.execute(columns_query, (live, table)).fetchall()]
    if not current:
        return [f"{table}: no live table"]
    if set(rebuilt) != set(current):
        return [f"{table}: columns differ (live {current}, rebuilt {rebuilt})"]
    columns = SQL(", ").join(Identifier(c) for c in rebuilt)
    found: list[str] = []
    for first, second, label in ((shadow, live, "only in the rebuilt"), (live, shadow, "only in the live")):
        query = SQL(
            "SELECT row_to_json(d)::text AS row, count(*) OVER () AS n FROM"
            " (SELECT {c} FROM {a}.{t} EXCEPT ALL SELECT {c} FROM {b}.{t}) d LIMIT %s"
        ).format(c=columns, a=Identifier(first), b=Identifier(second), t=Identifier(table))
        rows = conn.execute(query, (sample,)).fetchall()
        if rows:
            found.append(f"{table}: {rows[0]['n']} rows {label}")
            found += [f"  {r['row'][:300]}" for r in rows]
    return found
