"""``memwarden worker``: the dispatcher and the Dramatiq actors in one process; and the
in-process fallback of ``memwarden serve`` when no Redis answers."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from uuid import UUID

import dramatiq

from bootstrap.runtime import Runtime
from domain.services.autopilot import PassResult
from domain.settings import Settings
from workers.actors import (
    AUTOPILOT_QUEUE,
    declare_autopilot,
    declare_checkpoints,
    holder_id,
    redis_broker,
    run_checkpoint,
)
from workers.dispatcher import Dispatcher, Sweeper, Ticker

log = logging.getLogger(__name__)
CHECKPOINT_CHECK_SECONDS = 5.0
"""How often a dispatching process looks whether the ledger head is due for a checkpoint."""


def checkpoint_ticker(settings: Settings, work: Callable[[], object]) -> Ticker:
    every = min(CHECKPOINT_CHECK_SECONDS, settings.checkpoint_every_seconds)
    return Ticker("checkpoints", every, work)


class WorkerProcess:
    """A runtime, the autopilot actor consuming its queue, and the dispatcher feeding it."""

    def __init__(self, settings: Settings, threads: int = 2, *, dispatch: bool = True) -> None:
        self.runtime = Runtime(settings)
        self.holder = holder_id()
        self.broker = redis_broker(settings)
        self.actor = declare_autopilot(self.broker, lambda: self.runtime.autopilot, self.holder)
        checkpoints = declare_checkpoints(self.broker, lambda: self.runtime.checkpoints, self.holder)
        self.dispatcher: Dispatcher | None = None
        self.sweeper: Sweeper | None = None
        self.ticker: Ticker | None = None
        if dispatch:
            self.dispatcher = Dispatcher(self.runtime.ledger, self._send)
            self.dispatcher.create_table()
            memory = self.runtime.memory
            self.sweeper = Sweeper(self.runtime.reads.unjudged_memories, self._send, lambda: memory.clock())  # noqa: PLW0108
            due = self.runtime.checkpoints.due
            self.ticker = checkpoint_ticker(settings, lambda: due() and checkpoints.send())
        self.worker = dramatiq.Worker(self.broker, queues={AUTOPILOT_QUEUE}, worker_threads=threads)

    def _send(self, memory_id: UUID, position: int) -> None:
        self.actor.send(str(memory_id), position)

    def start(self) -> None:
        self.worker.start()
        if self.dispatcher is not None:
            self.dispatcher.start()
        if self.sweeper is not None:
            self.sweeper.start()
        if self.ticker is not None:
            self.ticker.start()

    def stop(self) -> None:
        if self.ticker is not None:
            self.ticker.stop()
        if self.sweeper is not None:
            self.sweeper.stop()
        if self.dispatcher is not None:
            self.dispatcher.stop()
        self.worker.stop()
        self.broker.close()
        self.runtime.close()


class InProcessAutopilot:
    """No Redis: the dispatcher runs each pass itself, in a thread of the API process."""

    def __init__(self, runtime: Runtime) -> None:
        holder = holder_id()
        autopilot = runtime.autopilot
        self.dispatcher = Dispatcher(
            runtime.ledger,
            lambda memory_id, position: _judged(autopilot.judge_memory(memory_id, position, holder)),
        )
        self.dispatcher.create_table()
        checkpoints = runtime.checkpoints
        self.ticker = checkpoint_ticker(runtime.settings, lambda: run_checkpoint(checkpoints, holder))

    def start(self) -> None:
        self.dispatcher.start()
        self.ticker.start()

    def stop(self) -> None:
        self.ticker.stop()
        self.dispatcher.stop()


def _judged(result: PassResult) -> None:
    log.debug("autopilot: %s", result)


def run_worker(settings: Settings, stop: threading.Event, threads: int = 2) -> None:
    process = WorkerProcess(settings, threads)
    process.start()
    log.warning("memwarden worker: dispatcher and %s autopilot threads on %s", threads, settings.redis_url)
    try:
        stop.wait()
    finally:
        process.stop()
