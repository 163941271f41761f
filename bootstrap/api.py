"""What one API process runs, wired: its runtime (given, or opened from the settings), the
async write tickets, and the probes of the background passes it reports on."""

from __future__ import annotations

from memwarden.bootstrap.runtime import Runtime, api_runtime
from memwarden.bootstrap.tickets import WriteTickets, open_tickets
from memwarden.domain.model.passes import PassesHealth
from memwarden.domain.settings import Settings
from memwarden.workers.heartbeats import PassesProbe
from memwarden.workers.metrics import QueueDepth

QueueRows = list[tuple[tuple[tuple[str, str], ...], float]]


class ApiProcess:
    """The services of one API process. It closes the runtime only when it opened it."""

    def __init__(self, runtime: Runtime, tickets: WriteTickets, *, owns_runtime: bool) -> None:
        self.runtime = runtime
        self.tickets = tickets
        self._passes = PassesProbe(runtime.settings)
        self._queues = QueueDepth(runtime.settings)
        self._owns_runtime = owns_runtime

    def passes(self) -> PassesHealth:
        """Who runs the passes, and whether anyone consumes them."""
        return self._passes.health()

    def queue_depth(self) -> QueueRows:
        """The workers' queues, one ``(labels, depth)`` row each."""
        return self._queues.rows()

    def close(self) -> None:
        self.tickets.close()
        if self._owns_runtime:
            self.runtime.close()


def open_api_process(settings: Settings, runtime: Runtime | None = None) -> ApiProcess:
    """An API process on ``runtime``, or on one it opens from ``settings``."""
    opened = api_runtime(settings) if runtime is None else runtime
    try:
        return ApiProcess(
            opened, open_tickets(settings, opened.ticket_store, opened.memory), owns_runtime=runtime is None
        )
    except BaseException:
        if runtime is None:
            opened.close()
        raise
