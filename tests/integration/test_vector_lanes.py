"""The vector lane of several query vectors in one round trip (``ScopedView.vector_lanes``,
what a batch of writes and an autopilot batch look their neighbours up with) answers what
the lane answers for each vector alone, through the exact scan and the HNSW walk, and when
most of a vector's nearest memories are not visible (retired) and it must fetch deeper."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding.base import embed_rows
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.service import SearchQuery
from memwarden.projections.search.view import IN_MEMORY_MIN_QUERIES, Hit, ScopedView

AGENT = Identity(namespace="acme/eng/lanes", actor="bot", role="agent")
QUERIES = [
    "the colour of the front door is 7",  # near 60 corrections of one slot: all but one retired
    "amber basil cedar delta ember",
    "meadow nickel orchid pepper",
    "nothing like anything written here: zebra quartz",
]


WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lantern",
    "meadow",
    "nickel",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
]


def unrelated_notes(n: int) -> list[str]:
    """``n`` notes of five words each, no two in one sentence frame (so the write's band
    finds no contradiction among them and every one stays current)."""
    rng = random.Random(7)
    notes: set[str] = set()
    while len(notes) < n:
        notes.add(" ".join(rng.sample(WORDS, 5)))
    return sorted(notes)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        for n in range(60):  # each corrects the one before: 59 retired, one current
            rt.memory.write(
                AGENT,
                WriteMemory(
                    content=f"the colour of the front door is {n}",
                    subject="front door",
                    attribute="colour",
                    value=str(n),
                ),
            )
        for text in unrelated_notes(150):
            rt.memory.write(AGENT, WriteMemory(content=text))
        rt.reads.wait_for(rt.ledger.head_position())
        yield rt


def lanes(rt: Runtime, k: int, *, exact: bool) -> tuple[list[list[Hit]], list[list[Hit]]]:
    """(all at once, one by one) for ``QUERIES``, through the exact scan or the HNSW walk."""
    search = rt.reads.search
    assert search.embedder is not None
    vectors = [np.asarray(v) for v in embed_rows(search.embedder, QUERIES)]
    with search.view(AGENT, SearchQuery(query="", k=k), lambda: vectors[0]) as (view, *_):
        view.exact_scan = lambda: exact  # type: ignore[method-assign]
        together = view.vector_lanes(vectors, k)
        alone = [view.for_vector(v).vector_lane(k) for v in vectors]
    return together, alone


@pytest.mark.parametrize("k", [1, 10, 30])
def test_lanes_at_once_equal_each_lane_alone_in_an_exact_scan(runtime: Runtime, k: int) -> None:
    together, alone = lanes(runtime, k, exact=True)
    assert together == alone
    assert [len(hits) for hits in together] == [k] * len(QUERIES)


def test_lanes_at_once_find_what_each_hnsw_walk_finds(runtime: Runtime) -> None:
    together, alone = lanes(runtime, 10, exact=False)
    assert [{h.ref for h in hits} for hits in together] == [{h.ref for h in hits} for hits in alone]
    assert all(len(hits) == 10 for hits in together)


def test_a_vector_whose_nearest_are_retired_still_gets_k_current_memories(runtime: Runtime) -> None:
    together, _ = lanes(runtime, 30, exact=True)
    door = together[0]
    assert len(door) == 30
    with runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            f"SELECT id FROM {runtime.ledger.schema}.memory_objects WHERE id = ANY(%s) AND retired_at IS NULL",
            ([h.ref for h in door],),
        ).fetchall()
    assert len(rows) == 30, "every hit is a current memory"


def test_no_vectors_no_lanes(runtime: Runtime) -> None:
    search = runtime.reads.search
    with search.view(AGENT, SearchQuery(query="", k=5), None) as (view, *_):
        assert ScopedView.vector_lanes(view, [], 5) == []


def test_many_lanes_computed_in_memory_equal_the_lane_of_each(runtime: Runtime) -> None:
    """From ``IN_MEMORY_MIN_QUERIES`` vectors on, an exactly scanned scope's lanes are one
    matrix product over its visible vectors: the same memories, the same scores (to the
    rounding of float32), the same order as each lane alone."""
    search = runtime.reads.search
    assert search.embedder is not None
    texts = [*QUERIES, *unrelated_notes(150)[:: 150 // (IN_MEMORY_MIN_QUERIES + 2)]]
    assert len(texts) >= IN_MEMORY_MIN_QUERIES
    vectors = [np.asarray(v) for v in embed_rows(search.embedder, texts)]
    for k in (1, 10, 30):
        with search.view(AGENT, SearchQuery(query="", k=k), lambda: vectors[0]) as (view, *_):
            assert view.exact_scan()
            together = view.vector_lanes(vectors, k)
            alone = [view.for_vector(v).vector_lane(k) for v in vectors]
        for mine, theirs in zip(together, alone, strict=True):
            assert [h.score for h in mine] == pytest.approx([h.score for h in theirs], abs=1e-5)
            assert clear_of_ties(mine) == clear_of_ties(theirs)


def clear_of_ties(hits: list[Hit]) -> set[object]:
    """The memories of a lane whose place does not hang on rounding: every one but those
    within 1e-5 of the last one's score (the hash embedder makes many equal scores, which
    float32 and the database's arithmetic may order either way)."""
    last = hits[-1].score if hits else 0.0
    return {h.ref for h in hits if h.score > last + 1e-5}
