"""Re-embedding a ledger for another model, and switching the model the search index serves.
Pure: states, vectors and ``now`` in; events out (or a refusal).

A new embedder cannot be applied to an existing ledger by configuration alone: the vectors
already sealed are of the old model, and a query embedded by the new one cannot be compared
with them. So the switch is made in two steps, both on the ledger:

1. each memory that has text and no vector of the new model gets one
   (``MemoryReembedded``, on the memory's own stream, sealed with its own data key): the
   search index keeps these aside and goes on serving the old vectors;
2. once none is missing, ``EmbeddingModelAdopted``: the index serves the new vectors from
   that event on (``decide_adoption`` refuses while any is missing).
"""

from __future__ import annotations

from datetime import datetime

from memwarden.domain.model.errors import InvalidState
from memwarden.domain.model.events import EmbeddingModelAdopted, MemoryReembedded
from memwarden.domain.model.memory import MemoryState

REEMBEDDING = "reembed"
"""The pass's name (its lease, and its audit records' op)."""
LEDGER_SCOPE = "*"
"""The lease's namespace: the pass covers the whole ledger."""


class ReembeddingIncomplete(InvalidState):
    """Some memories still lack a vector of the model to adopt."""

    code = "reembedding_incomplete"


def needs_vector(state: MemoryState | None, model: str) -> bool:
    """Whether ``state`` is a memory that should have a vector of ``model`` and has none:
    it has text (not erased) and no vector of that model on the ledger."""
    return (
        state is not None
        and state.status != "erased"
        and state.content is not None
        and model not in state.embedding_models
    )


def decide_reembed(
    state: MemoryState | None, model: str, vector: bytes, now: datetime
) -> MemoryReembedded | None:
    """The memory's vector of ``model``; None when it needs none (erased, without text, or
    it has one already: a pass run again appends nothing)."""
    if not needs_vector(state, model):
        return None
    assert state is not None
    if not vector:
        raise ValueError("a re-embedding needs a vector")
    return MemoryReembedded(
        memory_id=state.id, namespace=state.namespace, embedding=vector, embedding_model=model, at=now
    )


def decide_adoption(
    serving: str | None, model: str, dimensions: int, missing: int, now: datetime
) -> EmbeddingModelAdopted | None:
    """Serve ``model`` from now on. None when it is served already; refused while
    ``missing`` memories lack a vector of it (the switch is only ever made on a complete
    set)."""
    if dimensions < 1:
        raise ValueError("a model has at least one dimension")
    if serving == model:
        return None
    if missing > 0:
        raise ReembeddingIncomplete(
            f"{missing} memories have no vector of {model} yet; the index keeps serving {serving}"
        )
    return EmbeddingModelAdopted(model=model, dimensions=dimensions, previous=serving, at=now)
