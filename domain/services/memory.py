"""The memory commands (write, write_batch, resolve_dispute, verify) behind one service, as
the composition root builds it. Each concern lives in a module of its own, and this service
builds them from its arguments and shares among them what they share (the ledger, the stream
loader, the command runner, the clock and id source, the embedding):

- ``writes``: the writes (``write_parts`` their parts, ``write_results`` their answers);
- ``disputes``: a reviewer's decision on a dispute;
- ``verification``: a countersignature;
- ``vectors``: the embedding new memories are sealed with; ``claims``: claim stream ids.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from uuid import UUID

from memwarden.domain.embedding import Embedder
from memwarden.domain.extraction import Extractor
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.memory import DisputeState, MemoryState
from memwarden.domain.ports import CommandLedger
from memwarden.domain.services.band import SynchronousBand
from memwarden.domain.services.claims import ClaimIds
from memwarden.domain.services.commands import CommandRunner, utcnow
from memwarden.domain.services.disputes import DisputeService
from memwarden.domain.services.memory_context import MemoryContext
from memwarden.domain.services.streams import Streams
from memwarden.domain.services.vectors import Embedding
from memwarden.domain.services.verification import VerificationService
from memwarden.domain.services.writes import WriteService


class MemoryService:
    def __init__(
        self,
        ledger: CommandLedger,
        claim_ids: ClaimIds,
        policy_for: Callable[[str], WritePolicy] | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
        embedder: Embedder | None = None,
        extractor: Extractor | None = None,
        *,
        streams: Streams | None = None,
        band: SynchronousBand | None = None,
        serving_embedder: Callable[[], Embedder | None] | None = None,
    ) -> None:
        """``streams``: the stream cache shared with the band (and other services of the
        process); ``band``, ``serving_embedder``: given by the composition root, which has
        the read models (without them: no band, new memories embedded by ``embedder``)."""
        self.ledger = ledger
        self.streams = Streams(ledger) if streams is None else streams
        self.claim_ids = claim_ids
        self.policy_for = policy_for or (lambda _namespace: WritePolicy())
        self.clock = clock
        self.new_id = new_id
        self.band = band
        """The synchronous band: a write's facts judged against their neighbours in its append."""
        self.embedding = Embedding(embedder, serving_embedder)
        # late-bound: a caller may swap the clock, the id source or the band after construction
        late_id = lambda: self.new_id()  # noqa: E731, PLW0108
        self.runner = CommandRunner(ledger, self.streams, lambda: self.clock(), late_id)  # noqa: PLW0108
        shared = MemoryContext(
            ledger, self.streams, self.runner, claim_ids, self.policy_for, self.embedding, late_id
        )
        self.writes = WriteService(shared, extractor, lambda: self.band)
        self.disputes = DisputeService(shared)
        self.verification = VerificationService(shared)
        # the commands, each answered by the part that owns it
        self.write = self.writes.write
        self.queue_write = self.writes.queue_write
        self.run_queued = self.writes.run_queued
        self.write_batch = self.writes.write_batch
        self.resolve_dispute = self.disputes.resolve_dispute
        self.verify = self.verification.verify

    @property
    def embedder(self) -> Embedder | None:
        """What new memories are embedded by (``Embedding.embedder``)."""
        return self.embedding.embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self.embedding.configured = embedder
        self.embedding.serving = None

    # -- reading authoritative state ---------------------------------------------------------

    def memory(self, memory_id: UUID) -> MemoryState | None:
        return self.streams.memories([memory_id]).get(memory_id)

    def dispute(self, dispute_id: UUID) -> DisputeState | None:
        return self.streams.disputes([dispute_id]).get(dispute_id)
