"""Asynchronous writes (``async: true``): a durable ticket table and a worker thread in
each API process.

The ticket (identity from the key, the domain command, msgspec-encoded) is committed
before the 202 is sent, so nothing accepted is lost: any API process on the database
claims pending tickets (``FOR UPDATE SKIP LOCKED``), and a ticket whose claimant died is
claimed again after ``STALE_SECONDS``. The submission is audited when it happens
(``MemoryService.queue_write``); the write itself goes through the command runner like
any other, so it is audited on the ledger when it runs. A ticket run twice after a crash
between the append and the result re-decides against the new state: the second run
deduplicates instead of storing twice. The HTTP edge converts its wire bodies to and
from what is stored here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal
from uuid import UUID, uuid4

import msgspec
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from domain.ledger.database import FailureRun
from domain.model.errors import DomainError, InvalidRequest
from domain.model.identity import Identity
from domain.services.memory import BatchItem

log = logging.getLogger(__name__)
STALE_SECONDS = 60
TicketState = Literal["pending", "running", "done", "failed"]


class Ticket(msgspec.Struct, frozen=True, kw_only=True):
    """A ticket as its submitter may see it: its state and, once run, the write's result."""

    state: TicketState
    result: dict[str, Any] | None = None


class TicketStore:
    """The ``write_tickets`` table (made by migration 0003_workers)."""

    def __init__(self, datastore: PostgresDatastore, schema: str) -> None:
        self.datastore = datastore
        self.table = SQL("{}.write_tickets").format(Identifier(schema))

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

    def claim(self) -> tuple[UUID, Identity, BatchItem | DomainError] | None:
        """The oldest open ticket, claimed; its command, or why it cannot be read."""
        with self.datastore.transaction(commit=True) as curs:
            row = curs.execute(
                SQL(
                    "UPDATE {t} SET state = 'running', claimed_at = now() WHERE ticket = ("
                    " SELECT ticket FROM {t} WHERE state = 'pending' OR (state = 'running'"
                    "  AND claimed_at < now() - make_interval(secs => %s))"
                    " ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)"
                    " RETURNING ticket, namespace, actor, role, body"
                ).format(t=self.table),
                (STALE_SECONDS,),
            ).fetchone()
        if row is None:
            return None
        identity = Identity(row["namespace"], row["actor"], row["role"])
        try:
            item: BatchItem | DomainError = msgspec.json.decode(bytes(row["body"]), type=BatchItem)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            item = InvalidRequest(f"the ticket's write cannot be read: {str(error)[:200]}")
        return row["ticket"], identity, item

    def finish(self, ticket: UUID, state: str, result: dict[str, Any]) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(
                # the body (the content, in the clear) is not kept once the write ran:
                # the ledger holds it sealed, where erasure can shred it
                SQL(
                    "UPDATE {t} SET state = %s, result = %s::jsonb, finished_at = now(), body = ''::bytea"
                    " WHERE ticket = %s"
                ).format(t=self.table),
                (state, msgspec.json.encode(result).decode(), ticket),
            )

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


class TicketWorker:
    """Runs pending tickets in a background thread of this process."""

    def __init__(
        self,
        store: TicketStore,
        write: Callable[[Identity, BatchItem], Any],
    ) -> None:
        self.store = store
        self.write = write
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memwarden-tickets", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def run_one(self) -> bool:
        claimed = self.store.claim()
        if claimed is None:
            return False
        ticket, identity, item = claimed
        if isinstance(item, DomainError):  # unreadable: it would never run
            self._failed(ticket, item)
            return True
        try:
            result = self.write(identity, item)
        except DomainError as error:  # refused, and audited by the service
            self._failed(ticket, error)
            return True
        except Exception:  # leave it claimed: it is retried when stale
            log.exception("ticket %s failed; will be retried", ticket)
            return True
        self.store.finish(ticket, "done", msgspec.to_builtins(result))
        return True

    def _failed(self, ticket: UUID, error: DomainError) -> None:
        self.store.finish(ticket, "failed", {"error": error.code, "detail": error.detail})

    def _run(self) -> None:
        failures = FailureRun("ticket worker", log)
        while not self._stop.is_set():
            try:
                busy = self.run_one()
            except Exception as error:  # noqa: BLE001 - logged once per run of failures
                failures.failed(error)
                busy = False
                self._stop.wait(0.5)
            else:
                failures.ended()
            if not busy:
                self.wake.wait(0.5)
                self.wake.clear()
