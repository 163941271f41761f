"""The dispatcher: follows the ledger's notification log with its own tracking record and
hands each new active memory to the autopilot (DESIGN.md section 4, step 9).

No trigger is lost between a commit and the queue: the tracking record only advances past
an event once its message was sent, in the same transaction that holds the dispatcher's
lock. A crash or a broker outage delays work, never drops it; a crash between a send and
the tracking update sends that memory again, which the idempotent pass shrugs off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

import redis
from psycopg.sql import SQL, Identifier

from domain.ledger.app import Ledger
from domain.ledger.database import FailureRun, database_outage
from domain.ledger.mapper import Recorded
from domain.model.events import MemoryWritten
from projections.autopilot.views import DISPATCH_TRACKING_TABLE as TRACKING_TABLE

log = logging.getLogger(__name__)
BATCH_SIZE = 500
IDLE_SECONDS = 0.2
MAX_BATCH_SECONDS = 2.0
"""A batch stops sending after this long and commits how far it got: in-process, each send
is a whole pass, and the record's transaction must not sit idle for long (the pool's
connections end an idle transaction after 30 s)."""
RETRY_SECONDS = 1.0


def broker_or_database_outage(error: BaseException) -> str | None:
    """Which service a dispatch failure says is down: one line in the log, not a
    traceback per retry while it stays down."""
    if isinstance(error, (redis.ConnectionError, redis.TimeoutError)):
        return "Redis"
    return database_outage(error)


Send = Callable[[UUID, int], None]
"""Hand one memory (its id, its ledger position) to the autopilot; raises when it cannot."""


class Dispatcher:
    def __init__(
        self,
        ledger: Ledger,
        send: Send,
        name: str = "autopilot",
        max_batch_seconds: float = MAX_BATCH_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.max_batch_seconds = max_batch_seconds
        self.send = send
        self.name = name
        self._table = SQL("{}.{}").format(Identifier(ledger.schema), Identifier(TRACKING_TABLE))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0

    def create_table(self) -> None:
        with self.ledger.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(hashtext('memwarden schema'))")
            curs.execute(
                SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, position bigint NOT NULL)").format(
                    self._table
                )
            )
            curs.execute(
                SQL("INSERT INTO {} (name, position) VALUES (%s, 0) ON CONFLICT (name) DO NOTHING").format(
                    self._table
                ),
                (self.name,),
            )

    def position(self) -> int:
        with self.ledger.datastore.get_connection() as conn:
            row = conn.execute(
                SQL("SELECT position FROM {} WHERE name = %s").format(self._table), (self.name,)
            ).fetchone()
        return int(row["position"]) if row else 0

    def dispatch_once(self) -> int:
        """Send the memories of the next batch; return how many events it moved past. Only
        one dispatcher (of any process) works at a time: the row lock of its record. A send
        that fails stops the batch there: the record stays before that event."""
        with self.ledger.datastore.transaction(commit=True) as curs:
            row = curs.execute(
                SQL("SELECT position FROM {} WHERE name = %s FOR UPDATE SKIP LOCKED").format(self._table),
                (self.name,),
            ).fetchone()
            if row is None:  # another dispatcher holds it
                return 0
            start = int(row["position"])
            events = self.ledger.read(start, BATCH_SIZE)
            reached, failure = self._send_all(events, start)
            if reached > start:
                curs.execute(
                    SQL("UPDATE {} SET position = %s WHERE name = %s").format(self._table),
                    (reached, self.name),
                )
        if failure is not None:  # the record moved as far as the sends went; then the error
            raise failure
        return reached - start

    def _send_all(self, events: list[Recorded], start: int) -> tuple[int, Exception | None]:
        """Send each new active memory in order; return the position reached (the event
        before the first failed send, or the last sent once ``max_batch_seconds`` passed)
        and that failure."""
        reached = start
        began = time.monotonic()
        for recorded in events:
            event = recorded.event
            if isinstance(event, MemoryWritten) and event.status == "active":
                try:
                    self.send(event.memory_id, int(recorded.position or 0))
                except Exception as error:  # noqa: BLE001 - any failure to send stops the batch here
                    return reached, error
                self.sent += 1
            reached = int(recorded.position or reached)
            if time.monotonic() - began > self.max_batch_seconds:
                break
        return reached, None

    def catch_up(self) -> int:
        moved = total = self.dispatch_once()
        while moved:
            moved = self.dispatch_once()
            total += moved
        return total

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"dispatcher-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        failures = FailureRun(f"dispatcher {self.name}", log, broker_or_database_outage)
        while not self._stop.is_set():
            try:
                moved = self.dispatch_once()
            except Exception as error:  # noqa: BLE001 - the broker or the database is down: retry, lose nothing
                failures.failed(error)
                self._stop.wait(RETRY_SECONDS)
                continue
            failures.ended()
            if not moved:
                self._stop.wait(IDLE_SECONDS)


SWEEP_SECONDS = 60.0
"""How often, and how old a memory must be, before a sweep hands an unjudged one back."""


class Sweeper:
    """Hands the autopilot every current memory no pass has judged for a while: one left
    ``judge_unavailable`` (the judge is back now?), ``unembedded``, or a message lost with a
    worker's Redis. The pass is idempotent, so a memory judged meanwhile costs nothing."""

    def __init__(
        self,
        unjudged: Callable[[datetime], list[tuple[UUID, int]]],
        send: Send,
        clock: Callable[[], datetime],
        every: float = SWEEP_SECONDS,
    ) -> None:
        self.unjudged = unjudged
        self.send = send
        self.clock = clock
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep_once(self) -> int:
        """Send what has waited longer than ``every``; return how many."""
        found = self.unjudged(self.clock() - timedelta(seconds=self.every))
        for memory_id, position in found:
            self.send(memory_id, position)
        return len(found)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="autopilot-sweeper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.sweep_once()
            except Exception:
                log.exception("autopilot sweep failed; trying again later")
