"""The dispatchers: each follows the ledger's notification log with its own tracking record
and hands each new active memory to the autopilot (docs/architecture.md section 4, step 9), or each
namespace with new material (memories, faults) to consolidation (section 6).

No trigger is lost between a commit and the queue: the tracking record only advances past
an event once its message was sent, in the same transaction that holds the dispatcher's
lock. A crash or a broker outage delays work, never drops it; a crash between a send and
the tracking update sends that memory again, which the idempotent pass shrugs off.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Generic, TypeVar, cast
from uuid import UUID

import msgspec
import redis
from psycopg.sql import SQL, Identifier

from memwarden.domain.background import Supervised
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.database import database_outage
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import ContextFaulted, MemoryWritten
from memwarden.projections.autopilot.views import DISPATCH_TRACKING_TABLE as TRACKING_TABLE

log = logging.getLogger(__name__)
BATCH_SIZE = 500
CONSOLIDATION_SPAN = 10
"""Batches consolidation's dispatcher reads in one go: its triggers are coalesced per
namespace over all of them (a pass reads the namespace's newest memories, not one event)."""
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


K = TypeVar("K")
Send = Callable[[UUID, int], None]
"""Hand one memory (its id, its ledger position) to the autopilot; raises when it cannot."""


def new_memories(events: Sequence[Recorded]) -> list[tuple[UUID, int]]:
    """The autopilot's triggers: each new active memory, at its position."""
    return [
        (r.event.memory_id, int(r.position or 0))
        for r in events
        if isinstance(r.event, MemoryWritten) and r.event.status == "active"
    ]


MAX_MEMORIES_PER_BATCH = 32
"""The most memories one autopilot message carries: a batch is one pass under one lease
take and one fenced append, and a pass must end well inside its lease (30 s)."""


class MemoryBatch(msgspec.Struct, frozen=True):
    """One autopilot message: new memories of one namespace, in ledger order, and the
    position of the last (the read models must reach it before the pass reads them)."""

    memory_ids: tuple[UUID, ...]
    position: int
    namespace: str | None = None
    """Theirs (for the pass's log line)."""


def memory_batches(events: Sequence[Recorded]) -> list[tuple[MemoryBatch, int]]:
    """The autopilot's triggers, grouped: the new active memories of each namespace, at
    most ``MAX_MEMORIES_PER_BATCH`` a batch, each batch at its *first* memory's position,
    in that order. So whenever the batches sent so far end at position p, every memory at
    or before p is in one of them: a failed send stops the record before its batch's
    first memory, and a batch cut short by time commits the last first position sent."""
    open_batches: dict[str, list[tuple[UUID, int]]] = {}
    batches: list[tuple[str, list[tuple[UUID, int]]]] = []
    for r in events:
        e = r.event
        if not (isinstance(e, MemoryWritten) and e.status == "active"):
            continue
        members = open_batches.get(e.namespace)
        if members is None or len(members) >= MAX_MEMORIES_PER_BATCH:
            members = open_batches[e.namespace] = []
            batches.append((e.namespace, members))
        members.append((e.memory_id, int(r.position or 0)))
    return [
        (MemoryBatch(tuple(m for m, _ in members), members[-1][1], namespace), members[0][1])
        for namespace, members in batches
    ]


def new_material(events: Sequence[Recorded]) -> list[tuple[str, int]]:
    """Consolidation's triggers: each namespace with a new active memory or a fault (a
    near-miss, or facts answering together), once per batch at its last such position (a
    pass at that position covers the earlier ones)."""
    latest: dict[str, int] = {}
    for r in events:
        e = r.event
        if (isinstance(e, MemoryWritten) and e.status == "active") or isinstance(e, ContextFaulted):
            latest.pop(e.namespace, None)
            latest[e.namespace] = int(r.position or 0)
    return list(latest.items())


class Dispatcher(Supervised, Generic[K]):
    """Follows the ledger and sends what ``select`` picks from each batch (keys and
    positions, in ledger order; by default each new active memory)."""

    def __init__(
        self,
        ledger: Ledger,
        send: Callable[[K, int], object],
        name: str = "autopilot",
        max_batch_seconds: float = MAX_BATCH_SECONDS,
        select: Callable[[Sequence[Recorded]], list[tuple[K, int]]] | None = None,
        pause: float = 0.0,
        span: int = 1,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self.pause = pause
        self.span = span
        self.batch_size = batch_size
        self.behind = False
        """The last dispatch stopped at the end of its span, not at the ledger's head: the
        next one follows at once, whatever the pause (a pause paces a dispatcher that keeps
        up; one that waited while behind would fall further behind for as long as the
        ledger grows faster than a span per pause)."""
        self.select = select or cast(Callable[[Sequence[Recorded]], list[tuple[K, int]]], new_memories)
        self.ledger = ledger
        self.max_batch_seconds = max_batch_seconds
        super().__init__(
            f"dispatcher-{name}",
            label=f"dispatcher {name}",
            outage=broker_or_database_outage,
            retry_seconds=RETRY_SECONDS,
            logger=log,
        )
        self.send = send
        self.name = name
        self._table = SQL("{}.{}").format(Identifier(ledger.schema), Identifier(TRACKING_TABLE))
        self.sent = 0
        self.backlog = 0
        """Triggers of the batch in hand not yet sent: in-process, the queue of passes."""

    def register(self) -> None:
        """Give this dispatcher its tracking record (at position 0) unless it has one; the
        table is made by migration 0003_workers."""
        with self.ledger.datastore.transaction(commit=True) as curs:
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
            events = self._read(start)
            reached, failure = self._send_all(events, start)
            if reached > start:
                curs.execute(
                    SQL("UPDATE {} SET position = %s WHERE name = %s").format(self._table),
                    (reached, self.name),
                )
        if failure is not None:  # the record moved as far as the sends went; then the error
            raise failure
        return reached - start

    def _read(self, start: int) -> list[Recorded]:
        """Up to ``span`` batches after ``start``; ``behind`` says whether more follow."""
        events: list[Recorded] = []
        self.behind = False
        for _ in range(self.span):
            batch = self.ledger.read(int(events[-1].position or start) if events else start, self.batch_size)
            events.extend(batch)
            if len(batch) < self.batch_size:
                return events
        self.behind = True
        return events

    def _send_all(self, events: list[Recorded], start: int) -> tuple[int, Exception | None]:
        """Send the batch's triggers in order; return the position reached (the event
        before the first failed send, or the last sent once ``max_batch_seconds`` passed)
        and that failure."""
        began = time.monotonic()
        triggers = self.select(events)
        try:
            for done, (key, position) in enumerate(triggers):
                self.backlog = len(triggers) - done
                try:
                    self.send(key, position)
                except Exception as error:  # noqa: BLE001 - any failure to send stops the batch here
                    return max(start, position - 1), error
                self.sent += 1
                if time.monotonic() - began > self.max_batch_seconds:
                    return position, None
        finally:
            self.backlog = 0
        return (int(events[-1].position or start) if events else start), None

    def catch_up(self) -> int:
        moved = total = self.dispatch_once()
        while moved:
            moved = self.dispatch_once()
            total += moved
        return total

    def _turn(self) -> float:
        moved = self.dispatch_once()
        if moved and self.behind:
            return 0.0
        return self.pause if moved else max(self.pause, IDLE_SECONDS)


class Ticker(Supervised):
    """Calls ``work`` every ``every`` seconds in a thread of its own until stopped; a
    failure is logged and the next tick tries again (Redis or the database down: one line
    when the outage starts and one when it ends, as the dispatchers log it)."""

    def __init__(self, name: str, every: float, work: Callable[[], object]) -> None:
        super().__init__(
            name,
            label=name,
            outage=broker_or_database_outage,
            retry_seconds=every,
            logger=log,
            first_rest=every,
        )
        self.every = every
        self.work = work

    def _turn(self) -> float:
        self.work()
        return self.every


SWEEP_SECONDS = 60.0
"""How often, and how old a memory must be, before a sweep hands an unjudged one back."""


class Sweeper(Ticker):
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
        super().__init__("autopilot-sweeper", every, self.sweep_once)
        self.unjudged = unjudged
        self.send = send
        self.clock = clock

    def sweep_once(self) -> int:
        """Send what has waited longer than ``every``; return how many."""
        found = self.unjudged(self.clock() - timedelta(seconds=self.every))
        for memory_id, position in found:
            self.send(memory_id, position)
        return len(found)
