"""``memwarden worker``: the dispatcher and the Dramatiq actors in one process; and the
in-process fallback of ``memwarden serve`` when no Redis answers."""

from __future__ import annotations

import logging
import threading
from uuid import UUID

import dramatiq

from bootstrap.runtime import Runtime
from domain.services.autopilot import PassResult
from domain.settings import Settings
from workers.actors import AUTOPILOT_QUEUE, declare_autopilot, holder_id, redis_broker
from workers.dispatcher import Dispatcher, Sweeper

log = logging.getLogger(__name__)


class WorkerProcess:
    """A runtime, the autopilot actor consuming its queue, and the dispatcher feeding it."""

    def __init__(self, settings: Settings, threads: int = 2, *, dispatch: bool = True) -> None:
        self.runtime = Runtime(settings)
        self.holder = holder_id()
        self.broker = redis_broker(settings)
        self.actor = declare_autopilot(self.broker, lambda: self.runtime.autopilot, self.holder)
        self.dispatcher: Dispatcher | None = None
        self.sweeper: Sweeper | None = None
        if dispatch:
            self.dispatcher = Dispatcher(self.runtime.ledger, self._send)
            self.dispatcher.register()
            memory = self.runtime.memory
            self.sweeper = Sweeper(self.runtime.reads.unjudged_memories, self._send, lambda: memory.clock())  # noqa: PLW0108
        self.worker = dramatiq.Worker(self.broker, queues={AUTOPILOT_QUEUE}, worker_threads=threads)

    def _send(self, memory_id: UUID, position: int) -> None:
        self.actor.send(str(memory_id), position)

    def start(self) -> None:
        self.worker.start()
        if self.dispatcher is not None:
            self.dispatcher.start()
        if self.sweeper is not None:
            self.sweeper.start()

    def stop(self) -> None:
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
        self.dispatcher.register()

    def start(self) -> None:
        self.dispatcher.start()

    def stop(self) -> None:
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
