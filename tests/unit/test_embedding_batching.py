"""BatchingEmbedder: concurrent callers share model calls and each gets its own rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from memwarden.domain.embedding import BatchingEmbedder, EmbedderUnavailable, HashEmbedder
from memwarden.domain.embedding.base import Matrix


class Slow:
    """A real (hashing) embedder that takes a while per call and counts its calls."""

    def __init__(self, fail: bool = False) -> None:
        self.inner = HashEmbedder(64)
        self.calls: list[int] = []
        self.fail = fail
        self.lock = threading.Lock()

    model_id = "slow-hash"
    dimensions = 64

    def embed(self, texts: Sequence[str]) -> Matrix:
        with self.lock:
            self.calls.append(len(texts))
        time.sleep(0.02)
        if self.fail:
            raise EmbedderUnavailable("down")
        return self.inner.embed(texts)


def run_concurrently(embedder: BatchingEmbedder, texts: list[list[str]]) -> list[Matrix | BaseException]:
    results: list[Matrix | BaseException] = [np.zeros(0, dtype=np.float32)] * len(texts)
    start = threading.Barrier(len(texts))

    def call(i: int) -> None:
        start.wait()
        try:
            results[i] = embedder.embed(texts[i])
        except EmbedderUnavailable as error:
            results[i] = error

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_callers_share_calls_and_get_their_own_rows() -> None:
    slow = Slow()
    batching = BatchingEmbedder(slow, max_batch=64)
    texts = [[f"text number {i}", f"another {i}"] for i in range(24)]
    results = run_concurrently(batching, texts)
    reference = HashEmbedder(64)
    for asked, got in zip(texts, results, strict=True):
        assert isinstance(got, np.ndarray)
        np.testing.assert_allclose(got, reference.embed(asked))
    assert sum(slow.calls) == 48
    assert len(slow.calls) < 24  # shared calls


def test_batches_never_exceed_the_limit() -> None:
    slow = Slow()
    results = run_concurrently(BatchingEmbedder(slow, max_batch=5), [[f"t{i}", f"u{i}"] for i in range(16)])
    assert all(isinstance(r, np.ndarray) and r.shape == (2, 64) for r in results)
    assert max(slow.calls) <= 5


def test_a_failure_reaches_every_waiter_and_the_next_call_tries_again() -> None:
    slow = Slow(fail=True)
    batching = BatchingEmbedder(slow)
    results = run_concurrently(batching, [["a"], ["b"], ["c"], ["d"]])
    assert all(isinstance(r, EmbedderUnavailable) for r in results)
    slow.fail = False
    assert batching.embed(["a"]).shape == (1, 64)


def test_one_caller_alone_runs_at_once() -> None:
    slow = Slow()
    batching = BatchingEmbedder(slow)
    assert batching.embed(["only"]).shape == (1, 64)
    assert slow.calls == [1]
    assert batching.model_id == "slow-hash"
    assert batching.dimensions == 64
    with pytest.raises(EmbedderUnavailable):
        BatchingEmbedder(Slow(fail=True)).embed(["x"])
