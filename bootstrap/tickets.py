"""The async writes of an API process, wired: the ticket store, who runs the tickets (a
thread of this process, or the workers' actor through Redis) and the memory service."""

from __future__ import annotations

import logging
from uuid import UUID

import redis

from memwarden.domain.model.identity import Identity
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.write_results import BatchItem
from memwarden.domain.settings import Settings
from memwarden.workers.actors import TicketSender
from memwarden.workers.tickets import UNTAKEN_SECONDS, Ticket, TicketStore, TicketWorker

log = logging.getLogger(__name__)


class WriteTickets:
    """The async writes: the ticket store holds the domain command, and its submission is
    audited by the memory service. With a ``sender`` (``MEMWARDEN_TICKETS=queue``), each
    committed ticket is sent to the workers' actor; when that fails, ``worker`` (this
    process's thread) runs it."""

    def __init__(
        self,
        store: TicketStore,
        memory: MemoryService,
        worker: TicketWorker,
        sender: TicketSender | None = None,
    ) -> None:
        self.store = store
        self.memory = memory
        self.worker = worker
        self.sender = sender

    def submit(self, identity: Identity, key_id: str, item: BatchItem) -> UUID:
        ticket = self.memory.queue_write(
            identity, item, lambda queued: self.store.submit(identity, key_id, queued)
        )
        if self.sender is None:
            self.worker.wake.set()
            return ticket
        try:
            self.sender.send(ticket)
        except (redis.RedisError, OSError) as error:  # committed already: nothing is lost
            log.warning("ticket %s: not sent to the workers (%s); this process runs it", ticket, error)
            self.worker.hand(ticket)
        return ticket

    def status(self, ticket: UUID, identity: Identity) -> Ticket | None:
        return self.store.status(ticket, identity)

    def open_counts(self) -> tuple[dict[str, int], float]:
        """The open tickets by state, and the age of the oldest (``/metrics``)."""
        return self.store.open_counts()

    def close(self) -> None:
        self.worker.stop()
        if self.sender is not None:
            self.sender.close()


def open_tickets(settings: Settings, store: TicketStore, memory: MemoryService) -> WriteTickets:
    """The ticket store, and who runs the tickets: this process's thread (``thread``), or
    the workers' actor (``queue``), this thread running only what could not be sent and
    what no worker took within ``UNTAKEN_SECONDS`` (say no worker runs)."""
    queued = settings.tickets == "queue"
    sender = TicketSender(settings) if queued else None
    min_age = min(UNTAKEN_SECONDS, settings.ticket_stale_seconds) if queued else 0.0
    worker = TicketWorker(store, memory.run_queued, min_age=min_age)
    worker.start()
    return WriteTickets(store, memory, worker, sender)
