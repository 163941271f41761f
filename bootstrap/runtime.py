"""A process's runtime, as the composition root builds it: settings -> storage (the schema
migrated or checked, the ledger) -> read models -> the command side, given what it takes of
the read models -> the services that need both. Each collaborator goes to a constructor."""

from __future__ import annotations

from datetime import timedelta
from types import TracebackType

from memwarden.bootstrap.core import ReadSide, command_side, configured_embedder, open_storage
from memwarden.domain.drafting import drafter_from_settings
from memwarden.domain.embedding.rerank import reranker_from_settings
from memwarden.domain.judging import judge_from_settings
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.services.autopilot import AutopilotService
from memwarden.domain.services.band import SynchronousBand
from memwarden.domain.services.checkpoints import CheckpointService
from memwarden.domain.services.consolidation import ConsolidationService
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
from memwarden.workers.tickets import TicketStore


def search_drivers(settings: Settings, warm: bool = True) -> dict[str, Driver]:
    """The drivers a namespace policy may name, with the reranking stage that
    ``settings.rerank`` asks for (the ms-marco cross-encoder by default), run where the
    lanes disagree or always (``rerank_when``, ``rerank_agreement``). ``warm``: its model
    loads in a background thread from now, else at the first search that reranks."""
    reranker, depth = reranker_from_settings(settings, background=warm, lazy=not warm)
    return policy_drivers(reranker, depth or RERANK_DEPTH, settings.rerank_when, settings.rerank_agreement)


class Runtime:
    def __init__(
        self, settings: Settings | None = None, *, follow: bool = True, warm_models: bool = False
    ) -> None:
        """``warm_models``: the models load in background threads from now, for a process
        that answers searches (``api_runtime``); else each loads at its first use, so the
        projector, a worker or a CLI command carries only the models it actually runs (the
        projector embeds but never reranks; ``keys list`` does neither)."""
        self.settings = settings = settings or Settings.from_env()
        embedder = configured_embedder(settings, warm=warm_models)
        storage = open_storage(settings)
        try:
            self.reads = ReadModels(
                storage.ledger,
                storage.params.conninfo(),
                wait_seconds=settings.read_wait_seconds,
                embedder=embedder,
                drivers=search_drivers(settings, warm_models),
            )
            self.reads.build_missing_indexes()
            self.judge = judge_from_settings(settings)
            self.neighbours = SearchNeighbours(self.reads.search, self.reads.wait_for)
            self.core = command_side(settings, storage, embedder, self._read_side())
            self._services(settings)
            if follow:
                self.reads.runner.start()
        except BaseException:
            storage.close()
            raise

    def _read_side(self) -> ReadSide:
        """What the command side's services take from this runtime's read models."""
        judge, neighbours = self.judge, self.neighbours
        return ReadSide(
            band=lambda streams: None if judge is None else SynchronousBand(neighbours, judge, streams),
            serving_embedder=self.reads.search.write_embedder,
            erasure_lookup=ProjectionErasureLookup(self.reads),
        )

    def _services(self, settings: Settings) -> None:
        """The services that need the read models, each given its collaborators."""
        memory, governance, ledger, reads = self.core.memory, self.core.governance, self.ledger, self.reads
        clock = lambda: memory.clock()  # noqa: E731, PLW0108 - late-bound: a test swaps the clock
        self.working_sets = WorkingSetService(
            memory.runner,
            SearchWorkingSets(reads.search, reads.runner.position),
            governance.effective_policy,
        )
        leases = Leases(ledger, clock, timedelta(seconds=settings.lease_seconds))
        self.autopilot = AutopilotService(
            memory,
            leases,
            self.neighbours,
            self.judge,
            lambda namespace: governance.effective_policy(namespace).conflict_review,
            reads.pending_memories,
        )
        self.reembed = ReembedService(
            ledger,
            memory.streams,
            leases,
            SearchVectorIndex(ledger, reads.wait_for),
            self.core.embedder,
            clock,
            lambda: memory.new_id(),  # noqa: PLW0108
        )
        self.knowledge = KnowledgeService(ledger, self.core.embedder, governance.write_policy)
        self.consolidation = ConsolidationService(
            memory,
            leases,
            self.neighbours,
            reads.namespace_memories,
            self.knowledge,
            reads.namespace_faults,
            drafter_from_settings(settings),
        )
        self.ticket_store = TicketStore(ledger.datastore, ledger.schema, settings.ticket_stale_seconds)
        """The async writes waiting for a thread of an API process or the workers' actor."""
        self.checkpoints = CheckpointService(
            ledger,
            memory.runner,
            leases,
            clock,
            reads.tree.root,
            settings.checkpoint_every_events,
            settings.checkpoint_every_seconds,
        )

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
