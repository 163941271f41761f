"""The services a route takes, as Litestar dependencies: each is built once by the composition
root (bootstrap/) and handed to every handler that names it (``memory: MemoryService``).
Dependencies are not request parameters: the OpenAPI document does not show them."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from litestar.datastructures import State
from litestar.di import Provide

from memwarden.api.http.state import STATE_KEY, ApiState


def _provide(service: Callable[[ApiState], object]) -> Provide:
    """The dependency of ``service`` of this process's ``ApiState``."""

    def provider(state: State) -> object:
        return service(cast(ApiState, state[STATE_KEY]))

    return Provide(provider, sync_to_thread=False)


SERVICES: dict[str, Provide] = {
    "memory": _provide(lambda api: api.memory),
    "governance": _provide(lambda api: api.governance),
    "erasure": _provide(lambda api: api.runtime.core.erasure),
    "autopilot": _provide(lambda api: api.runtime.autopilot),
    "consolidation": _provide(lambda api: api.runtime.consolidation),
    "working_sets": _provide(lambda api: api.runtime.working_sets),
    "reads": _provide(lambda api: api.reads),
    "ledger": _provide(lambda api: api.runtime.ledger),
    "settings": _provide(lambda api: api.runtime.settings),
    "tickets": _provide(lambda api: api.process.tickets),
    "process": _provide(lambda api: api.process),
    "edge": _provide(lambda api: api),
}
"""Each route names what it needs: ``memory: MemoryService``, ``reads: ReadModels``, … (``edge``:
this process's edge state: the metrics, the callers' last writes, the throttles the gate keeps)."""
