"""``by_length``: every text's row lands in its own place, whatever batches it ran in and on
however many lanes, an even batch keeps to its bounds (texts of nearly one length, a token
budget, a size), and lanes run batches at once."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.embedding.base import Matrix
from memwarden.domain.embedding.onnx import LENGTH_SPREAD, TOKENS_PER_BATCH, Encoded, by_length


class Recorded:
    """A model stand-in whose row for a text is a function of its tokens: (length, first
    token); it keeps the lengths of every batch it was run with."""

    def __init__(self, seconds: float = 0.0, fail_at: int | None = None) -> None:
        self.batches: list[list[int]] = []
        self.threads: set[int] = set()
        self.seconds = seconds
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def __call__(self, batch: list[Encoded]) -> Matrix:
        with self.lock:
            self.batches.append([len(ids) for ids, _ in batch])
            self.threads.add(threading.get_ident())
            if self.fail_at is not None and len(self.batches) == self.fail_at:
                raise RuntimeError("inference failed")
        time.sleep(self.seconds)
        return np.array([[len(ids), ids[0]] for ids, _ in batch], dtype=np.float32)


def encoded(lengths: list[int]) -> list[Encoded]:
    return [([n, *range(1, length)], [0] * length) for n, length in enumerate(lengths)]


lengths_strategy = st.lists(st.integers(min_value=1, max_value=512), min_size=1, max_size=300)


@given(
    lengths=lengths_strategy,
    batch_size=st.integers(min_value=1, max_value=80),
    even=st.booleans(),
    lanes=st.integers(min_value=1, max_value=3),
)
def test_every_row_lands_in_its_texts_place(
    lengths: list[int], batch_size: int, even: bool, lanes: int
) -> None:
    run = Recorded()
    zeros = np.zeros((len(lengths), 2), np.float32)
    rows = by_length(encoded(lengths), batch_size, run, zeros, even=even, lanes=lanes)
    assert rows.tolist() == [[float(length), float(n)] for n, length in enumerate(lengths)]
    assert sorted(n for batch in run.batches for n in batch) == sorted(lengths)
    assert all(len(batch) <= batch_size for batch in run.batches)


@given(lengths=lengths_strategy, batch_size=st.integers(min_value=1, max_value=80))
def test_an_even_batch_holds_texts_of_nearly_one_length_within_the_token_budget(
    lengths: list[int], batch_size: int
) -> None:
    run = Recorded()
    by_length(encoded(lengths), batch_size, run, np.zeros((len(lengths), 2), np.float32), even=True)
    for batch in run.batches:
        assert batch == sorted(batch)
        if len(batch) > 1:
            assert batch[-1] <= batch[0] * LENGTH_SPREAD + 2
            assert len(batch) * batch[-1] <= TOKENS_PER_BATCH


def test_a_mixed_window_runs_in_more_batches_than_fixed_size_ones_and_pads_less() -> None:
    lengths = [8 + (n * 37) % 200 for n in range(256)]
    fixed, even = Recorded(), Recorded()
    by_length(encoded(lengths), 32, fixed, np.zeros((256, 2), np.float32))
    by_length(encoded(lengths), 32, even, np.zeros((256, 2), np.float32), even=True)

    def padded(batches: list[list[int]]) -> int:
        return sum(len(batch) * max(batch) for batch in batches)

    assert len(fixed.batches) == 8
    assert len(even.batches) > 8
    assert padded(even.batches) < padded(fixed.batches) * 0.95


def test_two_lanes_run_two_batches_at_once() -> None:
    run = Recorded(seconds=0.2)
    began = time.perf_counter()
    by_length(encoded([10] * 8), 2, run, np.zeros((8, 2), np.float32), lanes=2)
    assert len(run.batches) == 4
    assert len(run.threads) == 2
    assert time.perf_counter() - began < 0.75  # 4 batches of 0.2 s, two at a time


def test_a_failing_batch_fails_the_call_and_no_lane_runs_on() -> None:
    run = Recorded(fail_at=2)
    with pytest.raises(RuntimeError, match="inference failed"):
        by_length(encoded([10] * 40), 2, run, np.zeros((40, 2), np.float32), lanes=2)
    assert len(run.batches) < 20
