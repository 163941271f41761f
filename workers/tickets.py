"""Asynchronous writes (``async: true``): a durable ticket table, and who applies them.

The ticket (identity from the key, the domain command, msgspec-encoded) is committed
before the 202 is sent, so nothing accepted is lost. It is applied by ``apply_ticket``: the
ticket is claimed in the table atomically (``pending``, or ``running`` for longer than the
stale time: its claimant died), the write runs through the command runner like any other
(audited on the ledger when it runs; the submission was audited when it happened,
``MemoryService.queue_write``), and the result is recorded under the claim (a claimant
that lost its claim records nothing). A second delivery finds nothing to claim and changes
nothing. Who calls it: the ``write_ticket`` Dramatiq actor of ``memwarden worker``
(``MEMWARDEN_TICKETS=queue``: the API sends each ticket's id once it committed, and a
sweep sends again what waited too long), or a thread of each API process (``thread``, or
a ticket whose send failed). A ticket run twice after a crash between the append and the
result re-decides against the new state: the second run deduplicates instead of storing
twice. The HTTP edge converts its wire bodies to and from what is stored here.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID, uuid4

import msgspec
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Composable, Identifier

from memwarden.domain.background import Supervised
from memwarden.domain.ledger.database import database_outage
from memwarden.domain.model.errors import DomainError, InvalidRequest
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import BatchItem

log = logging.getLogger(__name__)
STALE_SECONDS = 60.0
UNTAKEN_SECONDS = 5.0
"""With the tickets sent to the workers, an API process runs a ticket itself once it has
waited this long untaken (no worker runs, or its message was lost)."""
SWEEP_LIMIT = 500
"""A sweep sends at most this many overdue tickets."""
RETRY_SECONDS = 0.5
"""The in-process worker's pause after a failure (the database down) before it tries again."""
TicketState = Literal["pending", "running", "done", "failed"]


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """A ticket as its submitter may see it: its state and, once run, the write's result."""

    state: TicketState
    result: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """A ticket claimed for one run: its command (or why it cannot be read) and the claim's
    time, which fences the result (only this claim may record it)."""

    ticket: UUID
    identity: Identity
    item: BatchItem | DomainError
    claimed_at: datetime


_OPEN = (
    "(state = 'pending' AND created_at <= now() - make_interval(secs => %(age)s))"
    " OR (state = 'running' AND claimed_at < now() - make_interval(secs => %(stale)s))"
)
"""A ticket to claim: pending for at least ``age`` seconds, or claimed and not finished
for longer than ``stale`` (its claimant died)."""


class TicketStore:
    """The ``write_tickets`` table (made by migration 0003_workers)."""

    def __init__(
        self, datastore: PostgresDatastore, schema: str, stale_seconds: float = STALE_SECONDS
    ) -> None:
        self.datastore = datastore
        self.table = SQL("{}.write_tickets").format(Identifier(schema))
        self.stale_seconds = stale_seconds

    def submit(self, identity: Identity, key_id: str, item: BatchItem) -> UUID:
        ticket = uuid4()
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                SQL(
                    "INSERT INTO {t} (ticket, key_id, namespace, actor, role, body)"
                    " VALUES (%s, %s, %s, %s, %s, %s)"
                ).format(t=self.table),
                (
                    ticket,
                    key_id,
                    identity.namespace,
                    identity.actor,
                    identity.role,
                    msgspec.json.encode(item),
                ),
            )
        return ticket

    def claim(self, older_than: float = 0.0) -> Claimed | None:
        """The oldest open ticket (pending for ``older_than`` seconds at least), claimed."""
        return self._claim(SQL("TRUE"), {"age": older_than})

    def claim_ticket(self, ticket: UUID) -> Claimed | None:
        """``ticket``, claimed if it is open; None when it is done, failed, unknown, or
        claimed by a claimant that is not stale."""
        return self._claim(SQL("ticket = %(ticket)s"), {"age": 0.0, "ticket": ticket})

    def _claim(self, which: Composable, params: dict[str, Any]) -> Claimed | None:
        with self.datastore.transaction(commit=True) as curs:
            row = curs.execute(
                SQL(
                    "UPDATE {t} SET state = 'running', claimed_at = clock_timestamp() WHERE ticket = ("
                    " SELECT ticket FROM {t} WHERE {which} AND (" + _OPEN + ")"
                    " ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
                    " RETURNING ticket, namespace, actor, role, body, claimed_at"
                ).format(t=self.table, which=which),
                {**params, "stale": self.stale_seconds},
            ).fetchone()
        if row is None:
            return None
        try:
            item: BatchItem | DomainError = msgspec.json.decode(bytes(row["body"]), type=BatchItem)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            item = InvalidRequest(f"the ticket's write cannot be read: {str(error)[:200]}")
        identity = Identity(row["namespace"], row["actor"], row["role"])
        return Claimed(ticket=row["ticket"], identity=identity, item=item, claimed_at=row["claimed_at"])

    def overdue(self, older_than: float, limit: int = SWEEP_LIMIT) -> list[UUID]:
        """Open tickets pending for ``older_than`` seconds at least, or stale: what a sweep
        sends again (a message lost with Redis, a claimant that died)."""
        with self.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT ticket FROM {t} WHERE " + _OPEN + " ORDER BY created_at LIMIT %(limit)s").format(
                    t=self.table
                ),
                {"age": older_than, "stale": self.stale_seconds, "limit": limit},
            ).fetchall()
        return [row["ticket"] for row in rows]

    def finish(self, claimed: Claimed, state: TicketState, result: dict[str, Any]) -> bool:
        """Record the run's result, unless the claim was lost meanwhile (the ticket went
        stale and was claimed again): False then, and nothing changes."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                # the body (the content, in the clear) is not kept once the write ran:
                # the ledger holds it sealed, where erasure can shred it
                SQL(
                    "UPDATE {t} SET state = %s, result = %s::jsonb, finished_at = now(), body = ''::bytea"
                    " WHERE ticket = %s AND state = 'running' AND claimed_at = %s"
                ).format(t=self.table),
                (state, msgspec.json.encode(result).decode(), claimed.ticket, claimed.claimed_at),
            )
            return bool(curs.rowcount)

    def status(self, ticket: UUID, identity: Identity) -> Ticket | None:
        """The ticket's state, only for the identity that submitted it."""
        with self.datastore.get_connection() as conn:
            row = conn.execute(
                SQL(
                    "SELECT state, result FROM {t} WHERE ticket = %s AND namespace = %s AND actor = %s"
                ).format(t=self.table),
                (ticket, identity.namespace, identity.actor),
            ).fetchone()
        return None if row is None else Ticket(state=row["state"], result=row["result"])

    def open_counts(self) -> tuple[dict[str, int], float]:
        """For ``/metrics``: the open tickets by state, and the age in seconds of the oldest
        (0 with none), over the partial index of open tickets."""
        with self.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL(
                    "SELECT state, count(*) AS n, extract(epoch FROM now() - min(created_at)) AS age"
                    " FROM {t} WHERE state IN ('pending', 'running') GROUP BY state"
                ).format(t=self.table)
            ).fetchall()
        counts = {"pending": 0, "running": 0} | {row["state"]: int(row["n"]) for row in rows}
        return counts, max((float(row["age"]) for row in rows), default=0.0)


Write = Callable[[Identity, BatchItem], Any]
"""Run a queued write (``MemoryService.run_queued``): its result, or a ``DomainError``."""


def apply_ticket(store: TicketStore, write: Write, ticket: UUID) -> TicketState | None:
    """The actor's work, and the plain function it calls: claim ``ticket``, apply it,
    record the result. None when there was nothing to claim (done already, or another
    claimant has it): a redelivery, or a second worker, changes nothing."""
    claimed = store.claim_ticket(ticket)
    return None if claimed is None else run_claimed(store, write, claimed)


def run_claimed(store: TicketStore, write: Write, claimed: Claimed) -> TicketState | None:
    """Run a claimed ticket and record its result: ``done``, or ``failed`` for a write that
    was refused (audited by the service) or cannot be read. Any other failure leaves the
    ticket claimed (None): it is claimed again once stale."""
    if isinstance(claimed.item, DomainError):  # unreadable: it would never run
        return _failed(store, claimed, claimed.item)
    try:
        result = write(claimed.identity, claimed.item)
    except DomainError as error:  # refused, and audited by the service
        return _failed(store, claimed, error)
    except Exception:  # left claimed: retried once stale
        log.exception("ticket %s failed; it will be retried", claimed.ticket)
        return None
    store.finish(claimed, "done", msgspec.to_builtins(result))
    return "done"


def _failed(store: TicketStore, claimed: Claimed, error: DomainError) -> TicketState:
    store.finish(claimed, "failed", {"error": error.code, "detail": error.detail})
    return "failed"


class TicketWorker(Supervised):
    """Runs tickets in a background thread of this process: every open one (``min_age``
    0, ``MEMWARDEN_TICKETS=thread``), or only those handed to it (their send failed) and
    those left pending ``min_age`` seconds (no worker took them)."""

    def __init__(self, store: TicketStore, write: Write, min_age: float = 0.0, idle: float = 0.5) -> None:
        super().__init__(
            "memwarden-tickets",
            label="ticket worker",
            outage=database_outage,
            retry_seconds=RETRY_SECONDS,
            logger=log,
        )
        self.store = store
        self.write = write
        self.min_age = min_age
        self.idle = idle
        self.wake = threading.Event()
        self._handed: deque[UUID] = deque()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        super().stop()

    def hand(self, ticket: UUID) -> None:
        """Run ``ticket`` here, soon (its message could not be sent)."""
        self._handed.append(ticket)
        self.wake.set()

    def run_one(self) -> bool:
        if self._handed:
            ticket = self._handed[0]
            apply_ticket(self.store, self.write, ticket)
            self._handed.popleft()  # only once it ran: a database outage keeps it handed
            return True
        claimed = self.store.claim(self.min_age)
        if claimed is None:
            return False
        run_claimed(self.store, self.write, claimed)
        return True

    def _turn(self) -> float:
        return 0.0 if self.run_one() else self.idle

    def _rest(self, seconds: float) -> None:
        """Until ``seconds`` passed, a ticket is handed over, or the worker is stopped."""
        self.wake.wait(seconds)
        self.wake.clear()
