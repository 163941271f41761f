"""Re-embedding and the switch of the served model (domain/model/reembedding.py): pure."""

from __future__ import annotations

import pytest

from memwarden.domain.embedding import embedder_for_model, embedder_from_settings
from memwarden.domain.model.events import EmbeddingModelAdopted, MemoryErased, MemoryReembedded
from memwarden.domain.model.memory import erased_tombstone, evolve_memory
from memwarden.domain.model.reembedding import (
    ReembeddingIncomplete,
    decide_adoption,
    decide_reembed,
    needs_vector,
)
from memwarden.domain.settings import Settings
from tests.unit.builders import NS, T0, memory, uid

OLD, NEW = "feature-hash-v1-384", "feature-hash-v1-256"
VECTOR = b"\x00\x3c" * 4


def test_a_memory_with_text_and_no_vector_of_the_model_gets_one_sealed_on_its_own_stream() -> None:
    m = memory(embedding_models=(OLD,))
    event = decide_reembed(m, NEW, VECTOR, T0)
    assert isinstance(event, MemoryReembedded)
    assert (event.memory_id, event.stream_id, event.sealing_owner) == (m.id, m.id, m.id)
    assert event.SEALED == ("embedding",)
    assert (event.namespace, event.embedding_model, event.embedding, event.at) == (NS, NEW, VECTOR, T0)
    after = evolve_memory(m, event)
    assert after.embedding_models == (OLD, NEW)
    assert after.version == m.version + 1
    assert decide_reembed(after, NEW, VECTOR, T0) is None  # a second pass appends nothing


@pytest.mark.parametrize(
    "state",
    [
        None,
        memory(content=None),
        memory(embedding_models=(NEW,)),
        erased_tombstone(memory(), T0, 2),
    ],
    ids=["missing", "no text", "has one", "erased"],
)
def test_no_vector_for_what_needs_none(state: object) -> None:
    assert not needs_vector(state, NEW)  # type: ignore[arg-type]
    assert decide_reembed(state, NEW, VECTOR, T0) is None  # type: ignore[arg-type]


def test_retired_and_quarantined_memories_are_re_embedded_too() -> None:
    assert needs_vector(memory(status="retired"), NEW)
    assert needs_vector(memory(status="disputed"), NEW)


def test_erasure_forgets_the_models() -> None:
    m = evolve_memory(
        memory(embedding_models=(OLD,)),
        MemoryReembedded(memory_id=uid(1), namespace=NS, embedding=VECTOR, embedding_model=NEW, at=T0),
    )
    erased = evolve_memory(
        m, MemoryErased(memory_id=m.id, namespace=NS, certificate_id=uid(2), by="a", at=T0)
    )
    assert erased.embedding_models == ()
    assert not needs_vector(erased, NEW)


def test_a_tombstoned_re_embedding_adds_no_model() -> None:
    m = memory(embedding_models=(OLD,))
    tomb = MemoryReembedded(memory_id=m.id, namespace=NS, embedding=None, embedding_model=NEW, at=T0)
    assert evolve_memory(m, tomb).embedding_models == (OLD,)


def test_adoption_is_refused_while_any_memory_lacks_a_vector() -> None:
    with pytest.raises(ReembeddingIncomplete, match="3 memories"):
        decide_adoption(OLD, NEW, 256, 3, T0)


def test_adoption_of_a_complete_set_switches_once() -> None:
    event = decide_adoption(OLD, NEW, 256, 0, T0)
    assert event == EmbeddingModelAdopted(model=NEW, dimensions=256, previous=OLD, at=T0)
    assert decide_adoption(NEW, NEW, 256, 0, T0) is None  # served already: nothing to append
    assert decide_adoption(None, NEW, 256, 0, T0) is not None  # no vector yet: the first model


def test_adoption_needs_dimensions() -> None:
    with pytest.raises(ValueError, match="dimension"):
        decide_adoption(OLD, NEW, 0, 0, T0)


def test_the_factory_builds_hashing_models_by_choice_and_by_id() -> None:
    chosen = embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "hash-256"}))
    assert chosen is not None
    assert (chosen.model_id, chosen.dimensions) == (NEW, 256)
    by_id = embedder_for_model(NEW)
    assert by_id is not None
    assert by_id.dimensions == 256
    assert embedder_for_model("some-remote-model") is None
    with pytest.raises(ValueError, match="not one of"):
        embedder_from_settings(Settings.from_env({"MEMWARDEN_EMBEDDER": "hash-x"}))
