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
from collections.abc import Sequence
from typing import Any

import msgspec
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from domain.ledger.app import Ledger
from domain.ledger.mapper import Recorded
from projections.base import Projection

log = logging.getLogger(__name__)
BATCH_SIZE = 1000
TRACKING_TABLE = "projection_tracking"


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
        self.tracking = PostgresTrackingRecorder(ledger.datastore, tracking_table_name=TRACKING_TABLE)
        self.errors: dict[str, tuple[int, str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- set-up -----------------------------------------------------------------------------

    def create_tables(self) -> None:
        self.tracking.create_table()
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(hashtext('memwarden schema'))")
            for projection in self.projections:
                projection.create(curs, self.schema)

    # -- positions --------------------------------------------------------------------------

    def position_of(self, name: str) -> int:
        return self.tracking.max_tracking_id(name) or 0

    def position(self) -> int:
        """The position every projection has reached."""
        return min((self.position_of(p.name) for p in self.projections), default=0)

    def status(self) -> list[ProjectionStatus]:
        head = self.ledger.head_position()
        result = []
        for projection in self.projections:
            position = self.position_of(projection.name)
            error = self.errors.get(projection.name)
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
        """Apply batches until the ledger head (or ``until``); return the position reached."""
        while True:
            reached, applied = self._apply_next_batch()
            if applied == 0 or (until is not None and reached >= until):
                return reached

    def _apply_next_batch(self) -> tuple[int, int]:
        with self.ledger.datastore.get_connection() as conn, conn.transaction():
            if not self._try_lock(conn):
                return self.position(), 0
            live = [p for p in self.projections if p.name not in self.errors]
            positions = {p.name: self.position_of_in(conn, p.name) for p in live}
            if not live:
                return self.position(), 0
            start = min(positions.values())
            events = self.ledger.read(start, BATCH_SIZE)
            if not events:
                return start, 0
            last = events[-1].position
            assert last is not None
            with conn.cursor() as curs:
                for projection in live:
                    pending = [e for e in events if (e.position or 0) > positions[projection.name]]
                    if pending:
                        self._apply(curs, projection, pending, last)
            return last, len(events)

    def _apply(self, curs: Any, projection: Projection, pending: list[Recorded], last: int) -> None:
        """Apply a batch in a savepoint; on failure, find the poison event one by one.

        A projection that cannot process an event stops just before it (the events
        before it are applied and tracked) and reports it; it never skips it.
        """
        try:
            with curs.connection.transaction():
                projection.apply(curs, self.schema, pending)
                self._track(curs, projection.name, last)
        except Exception:  # noqa: BLE001 - any failure is narrowed down below
            self._apply_one_by_one(curs, projection, pending)

    def _apply_one_by_one(self, curs: Any, projection: Projection, pending: list[Recorded]) -> None:
        for recorded in pending:
            position = int(recorded.position or 0)
            try:
                with curs.connection.transaction():
                    projection.apply(curs, self.schema, [recorded])
                    self._track(curs, projection.name, position)
            except Exception as error:
                self.errors[projection.name] = (position, f"{type(error).__name__}: {error}")
                log.exception("projection %s stopped at position %s", projection.name, position)
                return

    def _track(self, curs: Any, name: str, position: int) -> None:
        self.tracking._insert_tracking(curs, Tracking(name, position))

    def position_of_in(self, conn: Connection[Any], name: str) -> int:
        query = SQL("SELECT notification_id FROM {}.{} WHERE application_name = %s").format(
            Identifier(self.schema), Identifier(TRACKING_TABLE)
        )
        row = conn.execute(query, (name,)).fetchone()
        return int(row["notification_id"]) if row else 0

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
            if self._thread is None:
                self.catch_up(position)
                if self.position() >= position:
                    return
            if time.monotonic() >= deadline:
                raise ProjectionLag(position, reached)
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    # -- background thread ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memwarden-projections", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        """Apply batches; when idle, sleep until the ledger announces an append."""
        listener: Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if listener is None:
                    listener = self._listen()
                _, applied = self._apply_next_batch()
                if applied == 0:
                    for _ in listener.notifies(timeout=0.2, stop_after=1):
                        pass
            except Exception:
                log.exception("projection runner failed; retrying")
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                listener = None
                self._stop.wait(0.5)
        if listener is not None:
            listener.close()

    def _listen(self) -> Connection[Any]:
        conn: Connection[Any] = Connection.connect(self.listen_conninfo, autocommit=True)
        conn.execute(SQL("LISTEN {}").format(Identifier(self.ledger.recorder.channel_name)))
        return conn
