"""The re-embedding pass (domain/model/reembedding.py): every memory with text gets a vector
of the target model (the configured embedder's), then the index is switched to that model.

The pass walks the memories the search index says lack a vector of the target model, in
ledger order, a batch at a time: it loads each memory's state from the ledger (its text,
decrypted), embeds the texts (sorted by length, in one call), and appends the vectors. Each
batch is one append per tenant, under the pass's lease (taken for that append, released by
its fence: a pass whose lease was taken over appends nothing), with its audit record. A
memory's vector goes on the memory's own stream at the version its decision read, so an
erasure that lands meanwhile wins and the pass decides again (it then needs no vector).
When none is missing the pass appends ``EmbeddingModelAdopted``. Run again, it finds
nothing to do and appends nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.embedding import Embedder, embed_rows, uncached, vector_to_bytes
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.events import EMBEDDING_MODEL_STREAM, EmbeddingModelAdopted, Event
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import Lease
from memwarden.domain.model.namespaces import tenant_of
from memwarden.domain.model.reembedding import (
    LEDGER_SCOPE,
    REEMBEDDING,
    ReembeddingIncomplete,
    decide_adoption,
    decide_reembed,
    needs_vector,
)
from memwarden.domain.ports import VectorIndex
from memwarden.domain.services.commands import CommandRunner, Decided, Note
from memwarden.domain.services.leases import Leases
from memwarden.domain.services.streams import Streams

DEFAULT_BATCH = 256
ROUNDS = 3
"""How many times the pass walks the index before it gives up adopting: memories written
while it ran (with the model served then) are walked again."""


class ReembedReport(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    dimensions: int
    reembedded: int
    """Memories given a vector of ``model`` by this run."""
    missing: int
    """Memories still without one (0 once adopted)."""
    serving: str | None
    """The model the index serves after this run."""
    adopted: bool
    """Whether this run switched the index to ``model``."""
    position: int | None = None
    """The ledger position of this run's last append (None: it appended nothing)."""


class ReembedService:
    def __init__(
        self,
        ledger: Ledger,
        streams: Streams,
        leases: Leases,
        index: VectorIndex,
        embedder: Embedder | None,
        clock: Callable[[], datetime],
        new_id: Callable[[], UUID],
    ) -> None:
        self.ledger = ledger
        self.streams = streams
        self.leases = leases
        self.index = index
        self.embedder = embedder
        self.runner = CommandRunner(ledger, streams, lambda: clock(), lambda: new_id())  # noqa: PLW0108

    def target(self) -> Embedder:
        if self.embedder is None:
            raise ReembeddingIncomplete(
                "no embedder is configured (MEMWARDEN_EMBEDDER=none): nothing to embed by"
            )
        return self.embedder

    def missing(self) -> int:
        """How many memories lack a vector of the target model, once the index is up to date."""
        self.index.wait_for(self.ledger.head_position())
        return self.index.count_lacking(self.target().model_id)

    def run(
        self,
        actor: str,
        batch: int = DEFAULT_BATCH,
        progress: Callable[[int], None] | None = None,
        holder: str | None = None,
    ) -> ReembedReport:
        """Re-embed what is missing and adopt the target model; ``progress`` is told how many
        memories this run has re-embedded so far. ``LeaseBusy``: another pass is running."""
        if batch < 1:
            raise ValueError("a batch holds at least one memory")
        embedder = self.target()
        model, dims = embedder.model_id, embedder.dimensions
        done, position, adopted = 0, None, False
        for _ in range(ROUNDS):
            count, last = self._walk(embedder, actor, holder or actor, batch, done, progress)
            done += count
            position = last or position
            try:
                adopted_at = self._adopt(model, dims, actor, holder or actor)
            except ReembeddingIncomplete:
                continue
            adopted = adopted_at is not None
            position = adopted_at or position
            break
        self.index.wait_for(position)
        serving = self.index.serving()
        return ReembedReport(
            model=model,
            dimensions=dims,
            reembedded=done,
            missing=self.index.count_lacking(model),
            serving=serving[0] if serving else None,
            adopted=adopted,
            position=position,
        )

    # -- the walk -----------------------------------------------------------------------------

    def _walk(
        self,
        embedder: Embedder,
        actor: str,
        holder: str,
        batch: int,
        done: int,
        progress: Callable[[int], None] | None,
    ) -> tuple[int, int | None]:
        """One walk over the index in ledger order: (memories re-embedded, last position)."""
        model = embedder.model_id
        self.index.wait_for(self.ledger.head_position())
        after, count, position = 0, 0, None
        while found := self.index.lacking(model, after, batch):
            after = found[-1].position
            by_tenant: dict[str, list[UUID]] = {}
            for lacking in found:
                by_tenant.setdefault(tenant_of(lacking.namespace), []).append(lacking.id)
            for tenant, ids in by_tenant.items():
                n, appended = self._batch(embedder, Identity(tenant, actor, "owner"), holder, ids)
                count += n
                position = appended or position
                if progress is not None:
                    progress(done + count)
            self.index.wait_for(position)
        return count, position

    def _batch(
        self, embedder: Embedder, identity: Identity, holder: str, ids: Sequence[UUID]
    ) -> tuple[int, int | None]:
        """Embed and append one tenant's batch: (memories re-embedded, position)."""
        model = embedder.model_id
        states = self.streams.memories(ids)
        texts = {i: s.content for i, s in states.items() if needs_vector(s, model) and s.content is not None}
        if not texts:
            return 0, None
        order = sorted(texts, key=lambda i: len(texts[i]))
        rows = embed_rows(uncached(embedder), [texts[i] for i in order])
        vectors = {i: vector_to_bytes(row) for i, row in zip(order, rows, strict=True)}

        def decide(now: datetime, _lease: Lease) -> Decided[tuple[int, int]]:
            current = self.streams.memories(vectors)
            events: list[Event] = []
            for memory_id, vector in vectors.items():
                event = decide_reembed(current.get(memory_id), model, vector, now)
                if event is not None:
                    events.append(event)
            versions = {e.stream_id: current[e.stream_id].version for e in events}
            note = Note(
                f"{len(events)} memories re-embedded with {model}",
                subjects=tuple(e.stream_id for e in events),
            )
            return Decided(result=lambda p: (len(events), p), events=events, versions=versions, note=note)

        lease = self.leases.acquire(REEMBEDDING, LEDGER_SCOPE, holder)
        contended = "the memories kept changing under the re-embedding pass"
        return self.leases.run_fenced(self.runner, lease, decide, contended, identity)

    # -- the switch ---------------------------------------------------------------------------

    def _adopt(self, model: str, dims: int, actor: str, holder: str) -> int | None:
        """Append the adoption of ``model`` when none lacks a vector of it: its position, or
        None when it is served already. ``ReembeddingIncomplete`` while some lack one."""
        self.index.wait_for(self.ledger.head_position())
        serving = self.index.serving()
        missing = self.index.count_lacking(model)
        if (
            decide_adoption(serving[0] if serving else None, model, dims, missing, self.runner.clock())
            is None
        ):
            return None
        lease = self.leases.acquire(REEMBEDDING, LEDGER_SCOPE, holder)
        refused: list[ReembeddingIncomplete] = []

        def decide(now: datetime, _lease: Lease) -> Decided[int | None]:
            refused.clear()
            self.index.wait_for(self.ledger.head_position())
            current = self.index.serving()
            try:
                event = decide_adoption(
                    current[0] if current else None, model, dims, self.index.count_lacking(model), now
                )
            except ReembeddingIncomplete as error:  # a write came in: release the lease, walk again
                refused.append(error)
                event = None
            note = Note(f"the search index serves {model} ({dims} dimensions) from here on")
            return Decided(
                result=lambda p: p if event is not None else None,
                events=[event] if event is not None else [],
                versions={EMBEDDING_MODEL_STREAM: _adoption_version(self.ledger)},
                note=note if event is not None else None,
            )

        identity = Identity(LEDGER_SCOPE, actor, "owner")
        position = self.leases.run_fenced(
            self.runner, lease, decide, "the serving model kept changing", identity
        )
        if refused:
            raise refused[0]
        return position


def _adoption_version(ledger: Ledger) -> int:
    head = ledger.stream_heads([EMBEDDING_MODEL_STREAM]).get(EMBEDDING_MODEL_STREAM)
    if head is not None and not isinstance(head.event, EmbeddingModelAdopted):
        raise TypeError(f"the serving model's stream holds a {type(head.event).__name__}")
    return head.originator_version if head is not None else 0
