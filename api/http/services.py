"""The services a route takes, as Litestar dependencies: each is built once by the composition
root (bootstrap/) and handed to every handler that names it (``memory: MemoryService``).
Dependencies are not request parameters: the OpenAPI document does not show them."""

from __future__ import annotations

from typing import cast

from litestar.datastructures import State
from litestar.di import Provide

from memwarden.api.http.state import STATE_KEY, ApiState
from memwarden.bootstrap.api import ApiProcess
from memwarden.bootstrap.tickets import WriteTickets
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.services.autopilot import AutopilotService
from memwarden.domain.services.consolidation import ConsolidationService
from memwarden.domain.services.erasure import ErasureService
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.working_sets import WorkingSetService
from memwarden.domain.settings import Settings
from memwarden.projections.reads import ReadModels


def _api(state: State) -> ApiState:
    return cast(ApiState, state[STATE_KEY])


def _memory(state: State) -> MemoryService:
    return _api(state).memory


def _governance(state: State) -> GovernanceService:
    return _api(state).governance


def _erasure(state: State) -> ErasureService:
    return _api(state).runtime.core.erasure


def _autopilot(state: State) -> AutopilotService:
    return _api(state).runtime.autopilot


def _consolidation(state: State) -> ConsolidationService:
    return _api(state).runtime.consolidation


def _working_sets(state: State) -> WorkingSetService:
    return _api(state).runtime.working_sets


def _reads(state: State) -> ReadModels:
    return _api(state).reads


def _ledger(state: State) -> Ledger:
    return _api(state).runtime.ledger


def _settings(state: State) -> Settings:
    return _api(state).runtime.settings


def _tickets(state: State) -> WriteTickets:
    return _api(state).process.tickets


def _process(state: State) -> ApiProcess:
    return _api(state).process


def _edge(state: State) -> ApiState:
    return _api(state)


SERVICES: dict[str, Provide] = {
    name: Provide(provider, sync_to_thread=False)
    for name, provider in {
        "memory": _memory,
        "governance": _governance,
        "erasure": _erasure,
        "autopilot": _autopilot,
        "consolidation": _consolidation,
        "working_sets": _working_sets,
        "reads": _reads,
        "ledger": _ledger,
        "settings": _settings,
        "tickets": _tickets,
        "process": _process,
        "edge": _edge,
    }.items()
}
"""Each route names what it needs: ``memory: MemoryService``, ``reads: ReadModels``, … (``edge``:
this process's edge state: the metrics, the callers' last writes, the throttles the gate keeps)."""
