"""The synchronous band of a write (DESIGN.md section 4, step 7): a fact written with no
slot is judged, inside the write, against its own namespace's current neighbours at cosine
``SUPERSEDE_MIN_COSINE`` or more; the neighbours the judge finds contradicted are settled
by the write decider exactly as a slot's incumbents are (supersede, or quarantine a lower
rank). A judge that cannot answer leaves the pair to the autopilot, which judges every
memory after commit: a write never fails, or waits long, for want of a judge.
"""

from __future__ import annotations

import logging
from typing import Protocol
from uuid import UUID

from domain.model.autopilot import NEIGHBOURS_K, SUPERSEDE_MIN_COSINE
from domain.model.commands import WriteMemory
from domain.model.judging import Judge, JudgeUnavailable, Statement
from domain.model.memory import MemoryState
from domain.services.streams import Streams

log = logging.getLogger(__name__)


class Similar(Protocol):
    """The read model the band needs: the ``k`` current memories of ``namespace`` (itself
    only) nearest to a vector, with their cosine, best first."""

    def similar(
        self, namespace: str, vector: bytes, k: int, min_cosine: float, model: str | None = None
    ) -> list[tuple[UUID, float]]:
        """None when the index serves another model than ``model``, the vector's."""
        ...


class Banded:
    """A fact's band: the vector it was judged by (the write seals it; no second embedding)
    and the neighbours the judge found contradicted."""

    __slots__ = ("contradicted", "model", "vector")

    def __init__(
        self,
        vector: bytes | None = None,
        contradicted: tuple[MemoryState, ...] = (),
        model: str | None = None,
    ) -> None:
        self.vector = vector
        self.contradicted = contradicted
        self.model = model
        """The model ``vector`` is of."""


def banded(command: WriteMemory) -> bool:
    """Whether a fact goes through the band: one with no slot."""
    return command.subject is None


class SynchronousBand:
    def __init__(self, similar: Similar, judge: Judge, streams: Streams) -> None:
        self.similar = similar
        self.judge = judge
        self.streams = streams

    def contradicted(
        self, namespace: str, command: WriteMemory, vector: bytes | None, model: str | None = None
    ) -> Banded:
        """The fact's own-namespace neighbours the judge says it contradicts (none for a
        slotted fact: its slot settles it), found by its ``vector`` of ``model`` (none
        without one: no embedder, or it was unavailable)."""
        if not banded(command) or vector is None:
            return Banded()
        found = self.similar.similar(namespace, vector, NEIGHBOURS_K, SUPERSEDE_MIN_COSINE, model)
        states = self.streams.memories(n for n, _ in found)
        new = Statement(content=command.content, value=command.value)
        contradicted: list[MemoryState] = []
        for neighbour_id, _ in found:
            neighbour = states.get(neighbour_id)
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
            if judgement.contradicts:
                contradicted.append(neighbour)
        return Banded(vector, tuple(contradicted), model)
