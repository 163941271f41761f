"""What the routes share in one API process: the runtime, caches, buckets, tickets."""

from __future__ import annotations

import logging
from uuid import UUID

import redis

from memwarden.api.console.session import ProcessSessions, RedisSessions, SessionStore
from memwarden.api.http.auth_throttle import AuthThrottle
from memwarden.api.http.limits import CallerState, ProcessCallerState, RedisCallerState, TokenBuckets
from memwarden.api.http.metrics import Metrics
from memwarden.api.http.schemas import TicketStatus, WriteBody
from memwarden.bootstrap.runtime import Runtime, api_runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.settings import Settings, deployment_key
from memwarden.projections.reads import ReadModels
from memwarden.workers.actors import TicketSender
from memwarden.workers.tickets import UNTAKEN_SECONDS, TicketStore, TicketWorker

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_048_576
STATE_KEY = "memwarden"


class WriteTickets:
    """The async writes of the HTTP edge: wire bodies in, wire statuses out; the ticket
    store holds the domain command, and its submission is audited by the memory service.
    With a ``sender`` (``MEMWARDEN_TICKETS=queue``), each committed ticket is sent to the
    workers' actor; when that fails, ``worker`` (this process's thread) runs it."""

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

    def submit(self, identity: Identity, key_id: str, body: WriteBody) -> UUID:
        ticket = self.memory.queue_write(
            identity, body.batch_item(), lambda item: self.store.submit(identity, key_id, item)
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

    def status(self, ticket: UUID, identity: Identity) -> TicketStatus | None:
        found = self.store.status(ticket, identity)
        return None if found is None else TicketStatus(state=found.state, result=found.result)


class ApiState:
    """What the routes share, per process."""

    def __init__(self, settings: Settings | None, runtime: Runtime | None) -> None:
        self.settings = settings
        self._given = runtime
        self._runtime = runtime
        self.metrics = Metrics()
        self.callers: CallerState = ProcessCallerState()
        self.anonymous_audits = TokenBuckets()
        self.auth_throttle = AuthThrottle()
        self.console_sessions: SessionStore = ProcessSessions()
        self.anonymous_audits_per_minute = 6_000
        self.max_body_bytes = MAX_BODY_BYTES
        self._tickets: WriteTickets | None = None
        self._ticket_worker: TicketWorker | None = None
        self._ticket_sender: TicketSender | None = None

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            msg = "the API runtime is not open"
            raise RuntimeError(msg)
        return self._runtime

    def deadline_seconds(self) -> float:
        """The request deadline (``Settings.request_deadline_seconds``) of the open runtime."""
        return self.runtime.settings.request_deadline_seconds

    def readiness_seconds(self) -> float:
        """How long ``/readyz`` waits for the database before it answers not ready."""
        return self.runtime.settings.db_timeout_seconds

    @property
    def governance(self) -> GovernanceService:
        return self.runtime.core.governance

    @property
    def memory(self) -> MemoryService:
        return self.runtime.memory

    @property
    def reads(self) -> ReadModels:
        return self.runtime.reads

    @property
    def tickets(self) -> WriteTickets:
        assert self._tickets is not None
        return self._tickets

    def open(self) -> None:
        settings = self.settings or Settings.from_env()
        if self._runtime is None:
            self._runtime = api_runtime(settings)
        if settings.shared_state == "redis":
            if settings.redis_url is None:  # Settings refuses this pair; a hand-made one too
                raise ValueError("MEMWARDEN_SHARED_STATE=redis needs REDIS_URL")
            self.callers = RedisCallerState(settings.redis_url, deployment_key(settings), self.metrics)
            self.console_sessions = RedisSessions(settings.redis_url, deployment_key(settings))
        self._open_tickets(settings)

    def _open_tickets(self, settings: Settings) -> None:
        """The ticket store, and who runs the tickets: this process's thread (``thread``),
        or the workers' actor (``queue``), this thread running only what could not be sent
        and what no worker took within ``UNTAKEN_SECONDS`` (say no worker runs)."""
        ledger = self.runtime.ledger
        store = TicketStore(ledger.datastore, ledger.schema, settings.ticket_stale_seconds)
        queued = settings.tickets == "queue"
        self._ticket_sender = TicketSender(settings) if queued else None
        min_age = min(UNTAKEN_SECONDS, settings.ticket_stale_seconds) if queued else 0.0
        self._ticket_worker = TicketWorker(store, self.memory.run_queued, min_age=min_age)
        self._tickets = WriteTickets(store, self.memory, self._ticket_worker, self._ticket_sender)
        self._ticket_worker.start()

    def close(self) -> None:
        if self._ticket_worker is not None:
            self._ticket_worker.stop()
        if self._ticket_sender is not None:
            self._ticket_sender.close()
        if self._given is None and self._runtime is not None:
            self._runtime.close()
            self._runtime = None
