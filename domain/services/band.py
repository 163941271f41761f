"""The synchronous band of a write (docs/architecture.md section 4, step 7): a fact written with no
slot is judged, inside the write, against its own namespace's current neighbours at cosine
``SUPERSEDE_MIN_COSINE`` or more; the neighbours the judge finds contradicted are settled
by the write decider under the namespace's ``conflict_review`` dial, exactly as the
autopilot would settle them (domain/model/settling.py). The write records every neighbour
the band judged (``MemoryWritten.band_judged``): the autopilot judges the rest, so each
pair is judged once. A neighbour the index does not hold yet (written a moment before)
is the autopilot's too: its pass waits for the index. A judge that cannot answer leaves the
pair to the autopilot: a write never fails, or waits long, for want of a judge.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

from memwarden.domain.model.autopilot import NEIGHBOURS_K, SUPERSEDE_MIN_COSINE
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.judging import Judge, JudgeUnavailable, Statement
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.settling import Pair
from memwarden.domain.ports import Similar
from memwarden.domain.services.streams import Streams

log = logging.getLogger(__name__)


class Banded:
    """A fact's band: the vector it was judged by (the write seals it; no second embedding),
    the neighbours the judge found contradicted and every neighbour it judged."""

    __slots__ = ("contradicted", "judge", "judged", "model", "vector")

    def __init__(
        self,
        vector: bytes | None = None,
        contradicted: tuple[Pair, ...] = (),
        model: str | None = None,
        judged: tuple[UUID, ...] = (),
        judge: str = "",
    ) -> None:
        self.vector = vector
        self.contradicted = contradicted
        self.model = model
        """The model ``vector`` is of."""
        self.judged = judged
        self.judge = judge


def banded(command: WriteMemory) -> bool:
    """Whether a fact goes through the band: one with no slot."""
    return command.subject is None


class SynchronousBand:
    def __init__(self, similar: Similar, judge: Judge, streams: Streams) -> None:
        self.similar = similar
        self.judge = judge
        self.streams = streams

    def contradicted(
        self, namespace: str, facts: Sequence[tuple[WriteMemory, bytes | None]], model: str | None = None
    ) -> list[Banded]:
        """For each fact, its own-namespace neighbours the judge says it contradicts (none
        for a slotted fact: its slot settles it), found by its vector of ``model`` (none without
        one: no embedder, or it was unavailable). The facts of a write are looked up together: one
        neighbour lookup, one load of the neighbours."""
        looked_up = [(i, vector) for i, (fact, vector) in enumerate(facts) if banded(fact) and vector]
        lanes = (
            self.similar.similar(
                namespace, [v for _, v in looked_up], NEIGHBOURS_K, SUPERSEDE_MIN_COSINE, model
            )
            if looked_up
            else []
        )
        states = self.streams.memories(n for found in lanes for n, _ in found)
        bands = [Banded() for _ in facts]
        for (i, vector), found in zip(looked_up, lanes, strict=True):
            neighbours = [(states.get(n), cosine) for n, cosine in found]
            judged, contradicted = self._judged(namespace, facts[i][0], neighbours)
            bands[i] = Banded(vector, contradicted, model, judged, self.judge.name)
        return bands

    def _judged(
        self, namespace: str, command: WriteMemory, neighbours: Sequence[tuple[MemoryState | None, float]]
    ) -> tuple[tuple[UUID, ...], tuple[Pair, ...]]:
        """The ``neighbours`` of ``namespace`` the judge judged ``command`` against, and those
        it finds contradicted; a judge that cannot answer leaves the rest to the autopilot."""
        new = Statement(content=command.content, value=command.value)
        judged: list[UUID] = []
        contradicted: list[Pair] = []
        for neighbour, cosine in neighbours:
            if neighbour is None or neighbour.namespace != namespace or neighbour.content is None:
                continue
            old = Statement(
                content=neighbour.content,
                subject=neighbour.subject,
                attribute=neighbour.attribute,
                value=neighbour.value,
            )
            try:
                judgement = self.judge.judge(old, new)
            except JudgeUnavailable as error:
                log.warning(
                    "judge %s unavailable in a write; the autopilot will judge: %s", self.judge.name, error
                )
                break
            judged.append(neighbour.id)
            if judgement.contradicts:
                contradicted.append(Pair(neighbour=neighbour, cosine=cosine, judgement=judgement))
        return tuple(judged), tuple(contradicted)
