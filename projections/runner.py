"""Follow the ledger's notification log into the projections, with tracking records.

Each batch is applied in ONE transaction together with each projection's tracking
record, so a read model always knows exactly which position it reflects. Several
processes may run a runner: a transaction-scoped advisory lock lets one apply a batch
while the others wait for the tracking record to move.

Around this core: ``projections.tracking`` (the records), ``projections.followers`` (the
background threads), ``projections.deferred_index`` (when HNSW-like indexes are dropped
and built again) and ``projections.rebuild`` (a projection rebuilt beside the live one).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import msgspec
from psycopg import Connection, Cursor

from memwarden.domain.ledger import locks
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.database import unavailable
from memwarden.domain.ledger.mapper import Recorded
from memwarden.projections.base import Projection
from memwarden.projections.deferred_index import DeferredIndexPolicy
from memwarden.projections.followers import Follower, Step, projecting, watching
from memwarden.projections.tracking import Applied, Position, Stop, Tracking, projected_channel

log = logging.getLogger(__name__)
BATCH_SIZE = 1000
STOP_CHECK_SECONDS = 1.0
"""How often a runner with a stopped projection asks whether a rebuild (in any process)
has since carried it past its stop."""

Positions = dict[str, Position]
"""Each projection's tracked position, by name."""


def _redacted(error: Exception) -> str:
    """What a stop says in a table: the error's kind, never its message (a database error
    can quote the row it failed on, and erasure does not reach this table). The message is
    in the log of the process that hit it."""
    sqlstate = getattr(error, "sqlstate", None)
    return (
        type(error).__name__ + (f" (SQLSTATE {sqlstate})" if sqlstate else "") + "; the message is in the log"
    )


def _after(events: list[Recorded], position: Position) -> list[Recorded]:
    """The events of a batch a projection at ``position`` has not applied yet."""
    return [e for e in events if (e.position or 0) > position]


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
        """Where the background thread listens; read at each (re)connect."""
        self.projections = list(projections)
        self.schema = ledger.schema
        self.projected_channel = projected_channel(self.schema)
        self.tracking = Tracking(self.schema, self.projected_channel)
        """The tracking records (public: a rebuild switches with them)."""
        self.errors: dict[str, Stop] = {}
        """The projections this runner stopped, each at the event it could not process."""
        self.reached_hint = Position(0)
        """A position every projection is known (by this process) to have committed."""
        self.deferred = DeferredIndexPolicy(ledger, self.projections)
        self._follower: Follower | None = None
        self._applies_here = False
        self._next_stop_check = 0.0

    def projection(self, name: str) -> Projection:
        for projection in self.projections:
            if projection.name == name:
                return projection
        raise KeyError(name)

    # -- positions --------------------------------------------------------------------------

    def forget_reached(self) -> None:
        """Tracking records were reset outside this runner: stop trusting what it saw."""
        self.reached_hint = Position(0)

    def positions(self) -> Positions:
        """Each projection's tracked position (one query)."""
        with self.ledger.datastore.get_connection() as conn:
            return self.tracking.positions_in(conn, [p.name for p in self.projections])

    def position(self) -> Position:
        """The position every projection has reached."""
        return min(self.positions().values(), default=Position(0))

    def reached(self, position: int) -> bool:
        """One query: has every projection's tracking record reached ``position``?"""
        with self.ledger.datastore.get_connection() as conn:
            return self.tracking.all_reached(conn, [p.name for p in self.projections], position)

    def status(self) -> list[ProjectionStatus]:
        head = self.ledger.head_position()
        positions = self.positions()
        with self.ledger.datastore.get_connection() as conn:
            recorded = self.tracking.recorded_stops(conn)
        result = []
        for projection in self.projections:
            position = positions[projection.name]
            stop = self.errors.get(projection.name) or recorded.get(projection.name)
            if stop is not None and stop.position <= position:  # passed since: a fix, a rebuild
                stop = None
            result.append(
                ProjectionStatus(
                    name=projection.name,
                    position=position,
                    lag=head - position,
                    error=stop.error if stop else None,
                    stopped_at=stop.position if stop else None,
                )
            )
        return result

    def resume(self, name: str) -> None:
        """Follow ``name`` again (its tables were rebuilt past its stop)."""
        self.errors.pop(name, None)

    # -- processing ---------------------------------------------------------------------------

    def catch_up(self, until: int | None = None) -> Position:
        """Apply batches until the ledger head (or ``until``); return the position reached.
        Only a catch-up to the head defers indexes (a reader helping up to its own write
        does not start or finish an index build)."""
        while True:
            applied = self._apply_next_batch(defer=until is None)
            if applied.events == 0 or (until is not None and applied.reached >= until):
                return applied.reached

    def _apply_next_batch(self, *, defer: bool = True) -> Applied:
        """Apply the next batch: all projections in one transaction, no savepoints, one
        tracking upsert. If anything fails, that transaction rolls back and the batch is
        applied again projection by projection, each in a savepoint (the careful path).
        With ``defer``, a batch far behind the head may drop indexes cheaper to build once
        (``DeferredIndexes``), and a batch near it builds them again."""
        try:
            applied = self._apply_batch(careful=False, defer=defer)
        except _FastPathFailed:
            return self._apply_batch(careful=True)
        if applied.events and not self.errors:
            self.reached_hint = max(self.reached_hint, applied.reached)
        if defer and applied.events < BATCH_SIZE and self.deferred.pending:
            self.deferred.build_pending(self.errors)
        return applied

    def _apply_batch(self, *, careful: bool, defer: bool = False) -> Applied:
        with self.ledger.datastore.get_connection() as conn, conn.transaction():
            if not locks.try_hold(conn, locks.PROJECTIONS):
                return Applied(self.position(), 0)
            self._resume_rebuilt(conn)
            live = [p for p in self.projections if p.name not in self.errors]
            if not live:
                return Applied(self.position(), 0)
            positions = self.tracking.positions_in(conn, [p.name for p in live])
            start = min(positions.values())
            events = self.ledger.read(start, BATCH_SIZE)
            if not events:
                return Applied(start, 0)
            last = events[-1].position
            assert last is not None
            with conn.cursor() as curs:
                if careful:
                    for projection in live:
                        if pending := _after(events, positions[projection.name]):
                            self._apply(curs, projection, pending, Position(last))
                else:
                    self._apply_all(curs, live, positions, events, defer=defer)
            return Applied(Position(last), len(events))

    def _resume_rebuilt(self, conn: Connection[Any]) -> None:
        """At most once a second while a projection is stopped: follow it again if a
        rebuild (by any process: the CLI, an API process) has carried it past its stop."""
        if not self.errors or time.monotonic() < self._next_stop_check:
            return
        self._next_stop_check = time.monotonic() + STOP_CHECK_SECONDS
        tracked = self.tracking.positions_in(conn, list(self.errors))
        for name, stop in list(self.errors.items()):
            if tracked[name] >= stop.position:
                self.resume(name)
                log.warning(
                    "projection %s: rebuilt past its stop at position %s; following it again",
                    name,
                    stop.position,
                )

    def _apply_all(
        self,
        curs: Cursor[Any],
        live: list[Projection],
        positions: Positions,
        events: list[Recorded],
        *,
        defer: bool = False,
    ) -> None:
        """The fast path: every live projection, then one tracking upsert for all."""
        near_head = len(events) < BATCH_SIZE
        try:
            if defer and not near_head:
                self.deferred.before_far_batch(curs, min(positions.values()), self.errors)
            for projection in live:
                if pending := _after(events, positions[projection.name]):
                    projection.apply(curs, self.schema, pending)
            if defer and near_head:  # build what a catch-up (here or elsewhere) deferred
                self.deferred.after_near_batch(curs, self.errors)
            last = Position(events[-1].position or 0)
            # the announcement is delivered only if this batch commits
            names = [p.name for p in live]
            self.tracking.advance(curs, names, last, announce=len(live) == len(self.projections))
        except Exception as error:
            if unavailable(error):  # the database's failure, not the batch's: retried as it is
                raise
            raise _FastPathFailed from error

    def _apply(
        self, curs: Cursor[Any], projection: Projection, pending: list[Recorded], last: Position
    ) -> None:
        """Apply a batch in a savepoint; on failure, find the poison event one by one.

        A projection that cannot process an event stops just before it (the events
        before it are applied and tracked) and reports it; it never skips it. A failure
        of the database itself (down, restarting) is no event's fault: it stops nothing,
        and the batch is tried again.
        """
        try:
            with curs.connection.transaction():
                projection.apply(curs, self.schema, pending)
                self.tracking.advance(curs, [projection.name], last)
        except Exception as error:
            if unavailable(error):
                raise
            self._apply_one_by_one(curs, projection, pending)

    def _apply_one_by_one(self, curs: Cursor[Any], projection: Projection, pending: list[Recorded]) -> None:
        for recorded in pending:
            position = Position(int(recorded.position or 0))
            try:
                with curs.connection.transaction():
                    projection.apply(curs, self.schema, [recorded])
                    self.tracking.advance(curs, [projection.name], position)
            except Exception as error:
                if unavailable(error):
                    raise
                self.errors[projection.name] = Stop(position, f"{type(error).__name__}: {error}")
                log.exception("projection %s stopped at position %s", projection.name, position)
                self.tracking.record_stop(curs, projection.name, Stop(position, _redacted(error)))
                return

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
        """Apply batches in a background thread of this process; at the head, sleep until
        the ledger announces an append."""
        step = projecting(lambda: self._apply_next_batch().events < BATCH_SIZE)
        channel = self.ledger.recorder.channel_name
        if self._follow(channel, step, thread="memwarden-projections", label="projector"):
            self._applies_here = True

    def watch(self) -> None:
        """Apply nothing; learn from the announcements of whichever process projects how far
        the read models are, so read-your-writes needs no query once they have passed."""
        step = watching(self._learn)
        self._follow(
            self.projected_channel, step, thread="memwarden-projection-watch", label="projection watch"
        )

    def _follow(self, channel: str, step: Step, *, thread: str, label: str) -> bool:
        """Start the one background thread of this runner; False if it has one already."""
        if self._follower is not None:
            return False
        self._follower = Follower(lambda: self.listen_conninfo, channel, step, thread=thread, label=label)
        return self._follower.start()

    def _learn(self, position: Position) -> None:
        self.reached_hint = max(self.reached_hint, position)

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.stop()
            self._follower = None
        self._applies_here = False


class _FastPathFailed(Exception):
    """A batch failed somewhere on the fast path; redo it on the careful path."""
