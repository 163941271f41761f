"""``memwarden worker``: the dispatcher and the Dramatiq actors (the autopilot,
consolidation, checkpoints, async write tickets) in one process; and the in-process
fallback of ``memwarden serve`` when ``REDIS_URL`` is unset (there, the API's own thread runs
the tickets)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from uuid import UUID

import dramatiq

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.background import Background
from memwarden.domain.services.autopilot import PassResult
from memwarden.domain.services.consolidation import ConsolidationResult
from memwarden.domain.settings import Settings
from memwarden.workers.actors import (
    AUTOPILOT_QUEUE,
    MAINTENANCE_QUEUE,
    TICKETS_QUEUE,
    declare_autopilot,
    declare_autopilot_batches,
    declare_checkpoints,
    declare_consolidation,
    declare_tickets,
    holder_id,
    redis_broker,
    run_checkpoint,
)
from memwarden.workers.dispatcher import (
    CONSOLIDATION_SPAN,
    Dispatcher,
    MemoryBatch,
    Sweeper,
    Ticker,
    memory_batches,
    new_material,
)
from memwarden.workers.heartbeats import Consumption, ConsumptionMiddleware, Heartbeat
from memwarden.workers.logs import pass_line, redact
from memwarden.workers.metrics import count_in_process, uncount
from memwarden.workers.tickets import TicketStore

log = logging.getLogger(__name__)
CHECKPOINT_CHECK_SECONDS = 5.0
"""How often a dispatching process looks whether the ledger head is due for a checkpoint."""
TICKET_SWEEP_SECONDS = 5.0
"""How often, at most, it looks for tickets left pending or stale past the stale time."""


def ticket_sweeper(store: TicketStore, send: Callable[[UUID], object]) -> Ticker:
    """Sends again every ticket left pending, or claimed and not finished, for longer than
    the stale time (a message lost with Redis, or with an API process that died between
    the commit and the send; a worker killed mid-ticket): the actor claims it once."""
    stale = store.stale_seconds

    def sweep() -> int:
        overdue = store.overdue(stale)
        for ticket in overdue:
            send(ticket)
        return len(overdue)

    return Ticker("ticket-sweeper", min(TICKET_SWEEP_SECONDS, stale / 2), sweep)


def checkpoint_ticker(settings: Settings, work: Callable[[], object]) -> Ticker:
    every = min(CHECKPOINT_CHECK_SECONDS, settings.checkpoint_every_seconds)
    return Ticker("checkpoints", every, work)


class WorkerProcess:
    """A runtime, the actors consuming the queue, and (``dispatch``) the dispatchers and
    tickers feeding it."""

    def __init__(self, settings: Settings, threads: int = 2, *, dispatch: bool = True) -> None:
        # The projector projects (``serve``'s child, or ``memwarden project``); a pass that
        # must see its position waits for it, and catches up itself if nobody projects.
        self.runtime = Runtime(settings, follow=False)
        self.runtime.reads.runner.watch()
        self.holder = holder_id()
        self.broker = redis_broker(settings)
        self.consumption = Consumption()
        self.broker.add_middleware(ConsumptionMiddleware(self.consumption))
        self.heartbeat = Heartbeat(settings, self.broker.client, self.holder, self.consumption)
        self.actor = declare_autopilot(self.broker, lambda: self.runtime.autopilot, self.holder)
        self.batch_actor = declare_autopilot_batches(self.broker, lambda: self.runtime.autopilot, self.holder)
        self.consolidation = declare_consolidation(
            self.broker, lambda: self.runtime.consolidation, self.holder
        )
        self.checkpoints = declare_checkpoints(self.broker, lambda: self.runtime.checkpoints, self.holder)
        self.tickets = self.runtime.ticket_store
        self.ticket_actor = declare_tickets(
            self.broker, lambda: self.tickets, lambda: self.runtime.memory.run_queued
        )
        self.dispatcher: Dispatcher[MemoryBatch] | None = None
        self.loops: list[Background] = []
        if dispatch:
            self.dispatcher = autopilot_dispatcher(self.runtime, self._send_batch)
            self.loops = [self.dispatcher, *self._feeders()]
            for loop in self.loops:
                if isinstance(loop, Dispatcher):
                    loop.register()
        # An older worker's consolidation and checkpoint messages may still be on the
        # autopilot queue: its threads run whatever actor a message names.
        self.worker = dramatiq.Worker(
            self.broker, queues={AUTOPILOT_QUEUE, TICKETS_QUEUE}, worker_threads=threads
        )
        self.maintenance = dramatiq.Worker(self.broker, queues={MAINTENANCE_QUEUE}, worker_threads=1)
        self.broker.logger.addFilter(_second_worker_is_meant)

    def _feeders(self) -> list[Background]:
        """Consolidation's dispatcher, the autopilot's and the tickets' sweeps, the
        checkpoint ticker."""
        memory, due = self.runtime.memory, self.runtime.checkpoints.due
        return [
            consolidation_dispatcher(self.runtime, self.consolidation.send),
            Sweeper(
                self.runtime.reads.unjudged_memories,
                self._send,
                lambda: memory.clock(),  # noqa: PLW0108
                self.runtime.settings.autopilot_sweep_seconds,
            ),
            checkpoint_ticker(self.runtime.settings, lambda: due() and self.checkpoints.send()),
            ticket_sweeper(self.tickets, lambda ticket: self.ticket_actor.send(str(ticket))),
        ]

    def _send(self, memory_id: UUID, position: int) -> None:
        self.actor.send(str(memory_id), position)

    def _send_batch(self, batch: MemoryBatch, _first: int) -> None:
        self.batch_actor.send([str(m) for m in batch.memory_ids], batch.position, batch.namespace)

    def start(self) -> None:
        self.worker.start()
        self.maintenance.start()
        self.heartbeat.start()
        for loop in self.loops:
            loop.start()

    def stop(self) -> None:
        for loop in reversed(self.loops):
            loop.stop()
        self.heartbeat.stop()
        self.worker.stop()
        self.maintenance.stop()
        self.broker.close()
        self.runtime.close()


def autopilot_dispatcher(
    runtime: Runtime, send: Callable[[MemoryBatch, int], object]
) -> Dispatcher[MemoryBatch]:
    """The autopilot's dispatcher: each batch's new memories of a namespace (``memory_batches``)."""
    return Dispatcher(runtime.ledger, send, select=memory_batches)


def _second_worker_is_meant(record: logging.LogRecord) -> bool:
    """Drop Dramatiq's warning that a second worker's middleware joins the broker's: two
    workers, each consuming only its own queues, are what ``WorkerProcess`` means."""
    return not (
        record.getMessage().startswith("You're adding a middleware of the same type twice")
        and "_WorkerMiddleware" in record.getMessage()
    )


def consolidation_dispatcher(runtime: Runtime, send: Callable[[str, int], object]) -> Dispatcher[str]:
    return Dispatcher(
        runtime.ledger,
        send,
        name="consolidation",
        select=new_material,
        pause=runtime.settings.consolidation_pause_seconds,
        span=CONSOLIDATION_SPAN,
    )


class InProcessAutopilot:
    """No Redis: the dispatchers run each pass themselves, in threads of the API process
    (the autopilot, consolidation), and so does the checkpoint ticker."""

    def __init__(self, runtime: Runtime) -> None:
        holder = holder_id()
        autopilot, consolidation, checkpoints = runtime.autopilot, runtime.consolidation, runtime.checkpoints
        self.dispatcher = autopilot_dispatcher(
            runtime,
            lambda batch, _first: _logged(
                "autopilot",
                batch.namespace,
                batch.position,
                lambda: autopilot.judge_memories(batch.memory_ids, batch.position, holder, take_along=True),
            ),
        )
        self.consolidation = consolidation_dispatcher(
            runtime,
            lambda namespace, position: _logged(
                "consolidation",
                namespace,
                position,
                lambda: consolidation.consolidate(namespace, position, holder),
            ),
        )
        self.loops: list[Background] = [
            self.dispatcher,
            self.consolidation,
            checkpoint_ticker(runtime.settings, lambda: run_checkpoint(checkpoints, holder)),
        ]
        self.dispatcher.register()
        self.consolidation.register()

    def start(self) -> None:
        for loop in self.loops:
            loop.start()
        count_in_process(self.dispatcher)
        count_in_process(self.consolidation)

    def stop(self) -> None:
        uncount(self.dispatcher)
        uncount(self.consolidation)
        for loop in reversed(self.loops):
            loop.stop()


def _logged(pass_name: str, namespace: str | None, position: int, work: Callable[[], object]) -> None:
    """An in-process pass, logged as one line as a worker logs its own (a failure is
    re-raised: the dispatcher stops before it and tries again)."""
    began = time.monotonic()
    try:
        done = work()
    except Exception as error:
        pass_line(
            pass_name, namespace, position, "failed", time.monotonic() - began, error=type(error).__name__
        )
        raise
    fields: dict[str, object] = {}
    if isinstance(done, list):
        fields["memories"] = len(done)
        fields["findings"] = sum(r.findings for r in done if isinstance(r, PassResult))
    elif isinstance(done, ConsolidationResult):
        fields["drafted"] = len(done.drafted)
    pass_line(pass_name, namespace, position, "done", time.monotonic() - began, **fields)


def run_worker(settings: Settings, stop: threading.Event, threads: int = 2) -> None:
    process = WorkerProcess(settings, threads)
    process.start()
    log.warning(
        "memwarden worker: dispatcher and %s actor threads on %s (holder %s)",
        threads,
        redact(settings.redis_url),
        process.holder,
    )
    try:
        stop.wait()
    finally:
        process.stop()
