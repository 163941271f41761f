"""The composition root: settings -> schema (migrated, or checked) -> core (ledger,
services) -> read models."""

from __future__ import annotations

from datetime import timedelta
from types import TracebackType

from memwarden.bootstrap.migrate import prepare_database
from memwarden.domain.drafting import drafter_from_settings
from memwarden.domain.embedding.rerank import reranker_from_env
from memwarden.domain.judging import judge_from_settings
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.services.autopilot import AutopilotService
from memwarden.domain.services.band import SynchronousBand
from memwarden.domain.services.checkpoints import CheckpointService
from memwarden.domain.services.consolidation import ConsolidationService
from memwarden.domain.services.core import Core
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.services.leases import Leases
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.reembed import ReembedService
from memwarden.domain.services.working_sets import WorkingSetService
from memwarden.domain.settings import Settings
from memwarden.projections.erasure.lookup import ProjectionErasureLookup
from memwarden.projections.reads import ReadModels
from memwarden.projections.search.assemble import SearchWorkingSets
from memwarden.projections.search.drivers import RERANK_DEPTH, Driver, policy_drivers
from memwarden.projections.search.neighbours import SearchNeighbours
from memwarden.projections.search.vectors import SearchVectorIndex


def search_drivers(warm: bool = True, lanes: int | None = None) -> dict[str, Driver]:
    """The drivers a namespace policy may name, with the reranking stage that
    ``MEMWARDEN_RERANK`` asks for (the ms-marco cross-encoder by default). ``warm``: its
    model loads in a background thread from now, else at the first search that reranks;
    ``lanes``: its inference sessions (the setting ``model_lanes``)."""
    reranker, depth = reranker_from_env(background=warm, lazy=not warm, lanes=lanes)
    return policy_drivers(reranker, depth or RERANK_DEPTH)


class Runtime:
    def __init__(
        self, settings: Settings | None = None, *, follow: bool = True, warm_models: bool = False
    ) -> None:
        """``warm_models``: the models load in background threads from now, for a process
        that answers searches (``api_runtime``); else each loads at its first use, so the
        projector, a worker or a CLI command carries only the models it actually runs (the
        projector embeds but never reranks; ``keys list`` does neither)."""
        self.settings = settings or Settings.from_env()
        self.core = Core(self.settings, prepare=prepare_database, warm_models=warm_models)
        try:
            self.reads = ReadModels(
                self.core.ledger,
                self.core.params.conninfo(),
                wait_seconds=self.settings.read_wait_seconds,
                embedder=self.core.embedder,
                drivers=search_drivers(warm_models, self.settings.model_lanes),
            )
            self.reads.build_missing_indexes()
            self.core.erasure.lookup = ProjectionErasureLookup(self.reads)
            memory = self.core.memory
            self.working_sets = WorkingSetService(
                memory.runner,
                SearchWorkingSets(self.reads.search, self.reads.runner.position),
                self.core.governance.effective_policy,
            )
            governance = self.core.governance
            neighbours, judge = (
                SearchNeighbours(self.reads.search, self.reads.wait_for),
                judge_from_settings(self.settings),
            )
            self.autopilot = AutopilotService(
                memory,
                Leases(
                    self.core.ledger,
                    lambda: memory.clock(),  # noqa: PLW0108
                    timedelta(seconds=self.settings.lease_seconds),
                ),
                neighbours,
                judge,
                lambda namespace: governance.effective_policy(namespace).conflict_review,
                self.reads.pending_memories,
            )
            if judge is not None:
                memory.band = SynchronousBand(neighbours, judge, memory.streams)
            memory.serving_embedder = self.reads.search.write_embedder
            self.reembed = ReembedService(
                self.core.ledger,
                memory.streams,
                self.autopilot.leases,
                SearchVectorIndex(self.core.ledger, self.reads.wait_for),
                self.core.embedder,
                lambda: memory.clock(),  # noqa: PLW0108
                lambda: memory.new_id(),  # noqa: PLW0108
            )
            self.consolidation = ConsolidationService(
                memory,
                self.autopilot.leases,
                self.autopilot.neighbours,
                self.reads.namespace_memories,
                KnowledgeService(self.core.ledger, self.core.embedder, governance.write_policy),
                self.reads.namespace_faults,
                drafter_from_settings(self.settings),
            )
            self.checkpoints = CheckpointService(
                self.core.ledger,
                memory.runner,
                self.autopilot.leases,
                lambda: memory.clock(),  # noqa: PLW0108
                self.reads.tree.root,
                self.settings.checkpoint_every_events,
                self.settings.checkpoint_every_seconds,
            )
            if follow:
                self.reads.runner.start()
        except BaseException:
            self.core.close()
            raise

    @property
    def memory(self) -> MemoryService:
        return self.core.memory

    @property
    def ledger(self) -> Ledger:
        return self.core.ledger

    def close(self) -> None:
        self.reads.runner.stop()
        self.reads.search.close()
        self.core.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def api_runtime(settings: Settings) -> Runtime:
    """An API process's runtime: it projects in a thread of its own (``projector`` =
    ``thread``), or only watches how far another process has projected (``external``)."""
    in_thread = settings.projector == "thread"
    runtime = Runtime(settings, follow=in_thread, warm_models=True)
    if not in_thread:
        runtime.reads.runner.watch()
    return runtime
