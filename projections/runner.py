"""Follow the ledger's notification log into the projections, with tracking records.

Each batch is applied in ONE transaction together with each projection's tracking
record, so a read model always knows exactly which position it reflects. Several
processes may run a runner: a transaction-scoped advisory lock lets one apply a batch
while the others wait for the tracking record to move.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from domain.ledger.app import Ledger
from domain.ledger.database import FailureRun, unavailable
from domain.ledger.mapper import Recorded
from projections.base import DeferredIndexes, Projection

log = logging.getLogger(__name__)
BATCH_SIZE = 1000
DEFERRED_CHECK_SECONDS = 1.0
"""How often a runner near the head asks whether another runner left an index deferred."""
STOP_CHECK_SECONDS = 1.0
"""How often a runner with a stopped projection asks whether a rebuild (in any process)
has since carried it past its stop."""
RETRY_SECONDS = 0.5
"""The pause before a background thread tries again after a failure."""
LISTEN_CONNECT_SECONDS = 5
"""The longest a background thread waits for its listening connection to open."""
TRACKING_TABLE = "projection_tracking"
"""Each projection's position (made by migration 0002_read_models, like every live table)."""
ERRORS_TABLE = "projection_errors"
"""Where a runner records the event a projection stopped at, so every process (an API
process beside a projector, the CLI) reports it, not only the one that hit it."""


def _redacted(error: Exception) -> str:
    """What a stop says in a table: the error's kind, never its message (a database error
    can quote the row it failed on, and erasure does not reach this table). The message is
    in the log of the process that hit it."""
    sqlstate = getattr(error, "sqlstate", None)
    return (
        type(error).__name__ + (f" (SQLSTATE {sqlstate})" if sqlstate else "") + "; the message is in the log"
    )


class ProjectionLag(Exception):
    """The read models have not reached the caller's position in time."""

    def __init__(self, position: int, reached: int, retry_after: int = 1) -> None:
        super().__init__(f"read models at position {reached}, waiting for {position}")
        self.position = position
        self.reached = reached
        self.retry_after = retry_after


class ProjectionStatus(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    position: int
    lag: int
    error: str | None = None
    stopped_at: int | None = None


class ProjectionRunner:
    def __init__(self, ledger: Ledger, projections: Sequence[Projection], listen_conninfo: str) -> None:
        self.ledger = ledger
        self.listen_conninfo = listen_conninfo
        self.projections = list(projections)
        self.schema = ledger.schema
        self.errors: dict[str, tuple[int, str]] = {}
        self.reached_hint = 0
        """A position every projection is known (by this process) to have committed."""
        self.projected_channel = f"{self.schema}_projected"
        """Announces, at each batch's commit, the position every projection has reached."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._applies_here = False
        self._build_pending = False
        self._deferring_all = [p for p in self.projections if isinstance(p, DeferredIndexes)]
        self._next_deferred_check = 0.0
        self._next_stop_check = 0.0
        tracking = SQL("{}.{}").format(Identifier(self.schema), Identifier(TRACKING_TABLE))
        # rendered once, not composed again for every batch
        self._positions_sql = (
            SQL("SELECT application_name, notification_id FROM {} WHERE application_name = ANY(%s)")
            .format(tracking)
            .as_string()
        )
        track = SQL(
            "INSERT INTO {t} (application_name, notification_id)"
            " SELECT name, %s FROM unnest(%s::text[]) AS name"
            " ON CONFLICT (application_name) DO UPDATE SET notification_id = EXCLUDED.notification_id"
            " WHERE {t}.notification_id < EXCLUDED.notification_id"
        ).format(t=tracking)
        self._track_sql = track.as_string()
        self._track_and_announce_sql = (
            SQL("WITH tracked AS ({}) SELECT pg_notify(%s, %s)").format(track).as_string()
        )

    # -- positions --------------------------------------------------------------------------

    def forget_reached(self) -> None:
        """Tracking records were reset outside this runner: stop trusting what it saw."""
        self.reached_hint = 0

    def positions(self) -> dict[str, int]:
        """Each projection's tracked position (one query)."""
        with self.ledger.datastore.get_connection() as conn:
            return self._positions_in(conn, [p.name for p in self.projections])

    def position(self) -> int:
        """The position every projection has reached."""
        return min(self.positions().values(), default=0)

    def status(self) -> list[ProjectionStatus]:
        head = self.ledger.head_position()
        positions = self.positions()
        recorded = self._recorded_errors()
        result = []
        for projection in self.projections:
            position = positions[projection.name]
            error = self.errors.get(projection.name) or recorded.get(projection.name)
            if error is not None and error[0] <= position:  # passed since: a fix, a rebuild
                error = None
            result.append(
                ProjectionStatus(
                    name=projection.name,
                    position=position,
                    lag=head - position,
                    error=error[1] if error else None,
                    stopped_at=error[0] if error else None,
                )
            )
        return result

    # -- processing ---------------------------------------------------------------------------

    def catch_up(self, until: int | None = None) -> int:
        """Apply batches until the ledger head (or ``until``); return the position reached.
        Only a catch-up to the head defers indexes (a reader helping up to its own write
        does not start or finish an index build)."""
        while True:
            reached, applied = self._apply_next_batch(defer=until is None)
            if applied == 0 or (until is not None and reached >= until):
                return reached

    def _apply_next_batch(self, *, defer: bool = True) -> tuple[int, int]:
        """Apply the next batch: all projections in one transaction, no savepoints, one
        tracking upsert. If anything fails, that transaction rolls back and the batch is
        applied again projection by projection, each in a savepoint (the careful path).
        With ``defer``, a batch far behind the head may drop indexes cheaper to build once
        (``DeferredIndexes``), and a batch near it builds them again."""
        try:
            reached, applied = self._apply_batch(careful=False, defer=defer)
        except _FastPathFailed:
            return self._apply_batch(careful=True)
        if applied and not self.errors:
            self.reached_hint = max(self.reached_hint, reached)
        if defer and applied < BATCH_SIZE and self._build_pending:
            self._build_deferred_indexes()
        return reached, applied

    def _deferring(self) -> list[DeferredIndexes]:
        """The live projections with deferrable indexes (an isinstance check against a
        runtime protocol is slow: the candidates are found once)."""
        return [p for p in self._deferring_all if p.name not in self.errors]

    def _deferred_check_due(self) -> bool:
        """At most once a second: has a runner (here or elsewhere) left an index to build?"""
        now = time.monotonic()
        if now < self._next_deferred_check:
            return False
        self._next_deferred_check = now + DEFERRED_CHECK_SECONDS
        return True

    def _defer_indexes(self, curs: Any, start: int) -> None:
        """A full batch: if the ledger is far ahead, let projections drop what is cheaper to
        build once at the end (the HNSW graph) than to keep up row by row."""
        deferring = self._deferring()
        if deferring:
            backlog = self.ledger.head_position() - start
            for projection in deferring:
                if projection.defer_indexes(curs, self.schema, backlog):
                    self._build_pending = True  # (a no-op if this batch rolls back)

    def _build_deferred_indexes(self) -> None:
        """Build deferred indexes in a transaction of their own, after the batch committed
        (readers already see its rows), holding the runners' lock so no batch runs meanwhile."""
        try:
            with self.ledger.datastore.get_connection() as conn, conn.transaction():
                if not self._try_lock(conn):  # another runner is applying: try after the next batch
                    return
                self._build_pending = False
                with conn.cursor() as curs:
                    for projection in self._deferring():
                        began = time.perf_counter()
                        projection.build_indexes(curs, self.schema)
                        took = time.perf_counter() - began
                        log.info("deferred indexes of %s built in %.1f s", projection.name, took)
        except Exception:
            self._build_pending = False  # checked again at the next batch near the head
            log.exception("building deferred indexes failed")

    def _apply_batch(self, *, careful: bool, defer: bool = False) -> tuple[int, int]:
        with self.ledger.datastore.get_connection() as conn, conn.transaction():
            if not self._try_lock(conn):
                return self.position(), 0
            if self.errors and time.monotonic() >= self._next_stop_check:
                self._next_stop_check = time.monotonic() + STOP_CHECK_SECONDS
                self._resume_rebuilt(conn)
            live = [p for p in self.projections if p.name not in self.errors]
            if not live:
                return self.position(), 0
            positions = self._positions_in(conn, [p.name for p in live])
            start = min(positions.values())
            events = self.ledger.read(start, BATCH_SIZE)
            if not events:
                return start, 0
            last = events[-1].position
            assert last is not None
            with conn.cursor() as curs:
                if careful:
                    for projection in live:
                        pending = [e for e in events if (e.position or 0) > positions[projection.name]]
                        if pending:
                            self._apply(curs, projection, pending, last)
                else:
                    near_head = len(events) < BATCH_SIZE
                    self._apply_all(curs, live, positions, events, last, defer=defer, near_head=near_head)
            return last, len(events)

    def _resume_rebuilt(self, conn: Connection[Any]) -> None:
        """Follow again a stopped projection that a rebuild (by any process: the CLI, an
        API process) has carried past the event it stopped at; its stop is cleared."""
        tracked = self._positions_in(conn, list(self.errors))
        for name, (stopped_at, _message) in list(self.errors.items()):
            if tracked[name] >= stopped_at:
                del self.errors[name]
                log.warning(
                    "projection %s: rebuilt past its stop at position %s; following it again",
                    name,
                    stopped_at,
                )

    def _apply_all(
        self,
        curs: Any,
        live: list[Projection],
        positions: dict[str, int],
        events: list[Recorded],
        last: int,
        *,
        defer: bool = False,
        near_head: bool = True,
    ) -> None:
        try:
            if defer and not near_head:
                self._defer_indexes(curs, min(positions.values()))
            for projection in live:
                pending = [e for e in events if (e.position or 0) > positions[projection.name]]
                if pending:
                    projection.apply(curs, self.schema, pending)
            if defer and near_head and self._deferred_check_due():  # build what a catch-up deferred
                self._build_pending = self._build_pending or any(
                    p.indexes_deferred(curs, self.schema) for p in self._deferring()
                )
            # the announcement is delivered only if this batch commits
            self._track(curs, [p.name for p in live], last, announce=len(live) == len(self.projections))
        except Exception as error:
            if unavailable(error):  # the database's failure, not the batch's: retried as it is
                raise
            raise _FastPathFailed from error

    def _apply(self, curs: Any, projection: Projection, pending: list[Recorded], last: int) -> None:
        """Apply a batch in a savepoint; on failure, find the poison event one by one.

        A projection that cannot process an event stops just before it (the events
        before it are applied and tracked) and reports it; it never skips it. A failure
        of the database itself (down, restarting) is no event's fault: it stops nothing,
        and the batch is tried again.
        """
        try:
            with curs.connection.transaction():
                projection.apply(curs, self.schema, pending)
                self._track(curs, [projection.name], last)
        except Exception as error:
            if unavailable(error):
                raise
            self._apply_one_by_one(curs, projection, pending)

    def _apply_one_by_one(self, curs: Any, projection: Projection, pending: list[Recorded]) -> None:
        for recorded in pending:
            position = int(recorded.position or 0)
            try:
                with curs.connection.transaction():
                    projection.apply(curs, self.schema, [recorded])
                    self._track(curs, [projection.name], position)
            except Exception as error:
                if unavailable(error):
                    raise
                message = f"{type(error).__name__}: {error}"
                self.errors[projection.name] = (position, message)
                log.exception("projection %s stopped at position %s", projection.name, position)
                self._record_error(curs, projection.name, position, _redacted(error))
                return

    def _record_error(self, curs: Any, name: str, position: int, message: str) -> None:
        """Committed with the batch: the events before the poison one, and the stop itself."""
        curs.execute(
            SQL(
                "INSERT INTO {}.{} (name, position, error) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, error = EXCLUDED.error,"
                " at = now()"
            ).format(Identifier(self.schema), Identifier(ERRORS_TABLE)),
            (name, position, message[:2000]),
        )

    def _recorded_errors(self) -> dict[str, tuple[int, str]]:
        """Stops recorded by any runner; one whose projection has since moved past it (a
        fix, a rebuild) no longer counts."""
        with self.ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT name, position, error FROM {}.{}").format(
                    Identifier(self.schema), Identifier(ERRORS_TABLE)
                )
            ).fetchall()
        return {row["name"]: (int(row["position"]), str(row["error"])) for row in rows}

    def _track(self, curs: Any, names: list[str], position: int, *, announce: bool = False) -> None:
        """Record that these projections reflect ``position`` (never moves a record back);
        with ``announce``, the same statement notifies the watchers (at commit)."""
        if announce:
            curs.execute(
                self._track_and_announce_sql, (position, names, self.projected_channel, str(position))
            )
        else:
            curs.execute(self._track_sql, (position, names))

    def _positions_in(self, conn: Connection[Any], names: list[str]) -> dict[str, int]:
        rows = conn.execute(self._positions_sql, (names,), prepare=True).fetchall()
        found = {row["application_name"]: int(row["notification_id"]) for row in rows}
        return {name: found.get(name, 0) for name in names}

    def position_of_in(self, conn: Connection[Any], name: str) -> int:
        return self._positions_in(conn, [name])[name]

    def _try_lock(self, conn: Connection[Any]) -> bool:
        row = conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext('memwarden projections')) AS ok"
        ).fetchone()
        return bool(row and row["ok"])

    # -- read-your-writes ------------------------------------------------------------------------

    def wait_for(self, position: int, timeout: float) -> None:
        """Block until every projection reflects ``position``; raise ProjectionLag on timeout."""
        deadline = time.monotonic() + timeout
        delay = 0.001
        while True:
            reached = self.position()
            if reached >= position:
                return
            if not self._applies_here:  # nothing here will apply it: help whoever projects
                self.catch_up(position)
                if self.position() >= position:
                    return
            if time.monotonic() >= deadline:
                raise ProjectionLag(position, reached)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    # -- background thread ----------------------------------------------------------------------

    def start(self) -> None:
        """Apply batches in a background thread of this process."""
        if self._start(self._run, "memwarden-projections"):
            self._applies_here = True

    def watch(self) -> None:
        """Apply nothing; learn from the announcements of whichever process projects how far
        the read models are, so read-your-writes needs no query once they have passed."""
        self._start(self._watch, "memwarden-projection-watch")

    def _start(self, target: Callable[[], None], name: str) -> bool:
        """Start the one background thread; False if this runner already has one."""
        if self._thread is not None:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._applies_here = False

    def _run(self) -> None:
        """Apply batches; when idle, sleep until the ledger announces an append."""

        def step(listener: Connection[Any]) -> None:
            _, applied = self._apply_next_batch()
            if applied < BATCH_SIZE:  # at the head: an append after this batch's read announces itself
                for _ in listener.notifies(timeout=0.2, stop_after=1):
                    pass

        self._follow(self.ledger.recorder.channel_name, step, "projector")

    def _watch(self) -> None:
        def step(listener: Connection[Any]) -> None:
            for notice in listener.notifies(timeout=0.2):
                self.reached_hint = max(self.reached_hint, int(notice.payload))

        self._follow(self.projected_channel, step, "projection watch")

    def _follow(self, channel: str, step: Callable[[Connection[Any]], None], label: str) -> None:
        """Run ``step`` with a listener on ``channel`` until stopped; reconnect after failures.
        A run of failures is logged once when it starts and once when it ends, with its count."""
        listener: Connection[Any] | None = None
        failures = FailureRun(label, log)
        while not self._stop.is_set():
            try:
                if listener is None:
                    listener = Connection.connect(
                        self.listen_conninfo, autocommit=True, connect_timeout=LISTEN_CONNECT_SECONDS
                    )
                    listener.execute(SQL("LISTEN {}").format(Identifier(channel)))
                step(listener)
            except Exception as error:  # noqa: BLE001 - logged by the run; tried again
                failures.failed(error)
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                listener = None
                self._stop.wait(RETRY_SECONDS)
            else:
                failures.ended()
        if listener is not None:
            listener.close()


# -- rebuilds ---------------------------------------------------------------------------------

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
        for projection in self.runner.projections:
            if projection.name == name:
                return projection
        raise KeyError(name)

    def rebuild(
        self, name: str, *, verify: bool = False, switch: bool = True, progress: Progress | None = None
    ) -> RebuildReport:
        projection = self.projection(name)
        shadow = f"{self.schema}__rebuild_{name}"[:63]
        started = time.perf_counter()
        datastore = self.ledger.datastore
        with datastore.transaction(commit=True) as curs:
            curs.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(shadow)))
            curs.execute(SQL("CREATE SCHEMA {}").format(Identifier(shadow)))
            projection.create(curs, shadow)
            deferred = isinstance(projection, DeferredIndexes) and projection.defer_indexes(
                curs, shadow, self.ledger.head_position()
            )
        try:
            with datastore.get_connection() as conn:
                head = self.ledger.head_position()
                position, events = self._build(conn, projection, shadow, 0, head, progress)
                if deferred and isinstance(projection, DeferredIndexes):  # built once, over all rows
                    with conn.transaction(), conn.cursor() as curs:
                        projection.build_indexes(curs, shadow)
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext('memwarden projections'))")
                    head = self.ledger.head_position()
                    position, more = self._build(conn, projection, shadow, position, head, progress)
                    events += more
                    differences: list[str] = []
                    if verify:
                        differences = self._verify(conn, projection, shadow, position)
                    if switch:
                        self._switch(conn, projection, shadow, position)
                        self.runner.errors.pop(name, None)
        finally:
            with datastore.transaction(commit=True) as curs:
                curs.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(shadow)))
        seconds = time.perf_counter() - started
        return RebuildReport(
            name=name,
            position=position,
            events=events,
            seconds=seconds,
            events_per_second=events / seconds if seconds > 0 else 0.0,
            switched=switch,
            verified=verify,
            differences=differences,
        )

    def _build(
        self,
        conn: Connection[Any],
        projection: Projection,
        schema: str,
        position: int,
        head: int,
        progress: Progress | None,
    ) -> tuple[int, int]:
        """Apply events after ``position`` up to ``head`` to ``schema``; each batch commits
        on its own unless the caller holds a transaction."""
        count = 0
        while position < head:
            events = self.ledger.read(position, self.batch_size, stop=head)
            if not events:
                break
            self._apply_batch(conn, projection, schema, events)
            position = int(events[-1].position or 0)
            count += len(events)
            if progress is not None:
                progress(projection.name, position, head)
        return position, count

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

    def _verify(self, conn: Connection[Any], projection: Projection, shadow: str, position: int) -> list[str]:
        """Bring the live model to ``position`` (we hold the runners' lock) and compare."""
        live_position = self.runner.position_of_in(conn, projection.name)
        if live_position < position:
            try:
                reached, _ = self._build(conn, projection, self.schema, live_position, position, None)
            except RebuildFailed as failed:
                return [f"the live model cannot reach position {position}: {failed}"]
            with conn.cursor() as curs:
                self.runner._track(curs, [projection.name], reached)
        found: list[str] = []
        for table in projection.tables:
            found += compare_tables(conn, self.schema, shadow, table)
        return found

    def _switch(self, conn: Connection[Any], projection: Projection, shadow: str, position: int) -> None:
        live = Identifier(self.schema)
        for table in projection.tables:
            conn.execute(SQL("LOCK TABLE {}.{} IN ACCESS EXCLUSIVE MODE").format(live, Identifier(table)))
        for table in projection.tables:
            conn.execute(SQL("DROP TABLE IF EXISTS {}.{}").format(live, Identifier(table)))
            conn.execute(
                SQL("ALTER TABLE {}.{} SET SCHEMA {}").format(Identifier(shadow), Identifier(table), live)
            )
        tracking = SQL("{}.{}").format(live, Identifier(TRACKING_TABLE))
        conn.execute(SQL("DELETE FROM {} WHERE application_name = %s").format(tracking), (projection.name,))
        conn.execute(
            SQL("INSERT INTO {} (application_name, notification_id) VALUES (%s, %s)").format(tracking),
            (projection.name, position),
        )


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


class _FastPathFailed(Exception):
    """A batch failed somewhere on the fast path; redo it on the careful path."""
