"""Concurrent callers share one model call.

A model embeds a batch far more cheaply per text than one text at a time (MiniLM on two
cores: ~180 texts/s one by one, ~330/s in batches), and concurrent single-text calls
would only fight over the same cores. ``BatchingEmbedder`` lets the first caller run
alone (no added latency when idle); whoever arrives while a call runs queues up, and the
next leader takes the whole queue as one batch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from memwarden.domain.embedding.base import Embedder, EmbedderUnavailable, EmbedderWrapper, Matrix

MAX_BATCH = 64


class _Request:
    __slots__ = ("done", "error", "rows", "texts")

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.rows: Matrix | None = None
        self.error: BaseException | None = None
        self.done = False


class BatchingEmbedder(EmbedderWrapper):
    def __init__(self, inner: Embedder, max_batch: int = MAX_BATCH) -> None:
        super().__init__(inner)
        self.max_batch = max_batch
        self._queue: list[_Request] = []
        self._running = False
        self._changed = threading.Condition()

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return self.inner.embed([])
        mine = _Request(texts)
        with self._changed:
            self._queue.append(mine)
        while True:
            with self._changed:
                while not mine.done and self._running:
                    self._changed.wait()
                if mine.done:
                    return _result(mine)
                self._running = True  # lead: take the queue's head (a batch) and run it
                batch = self._take()
            try:
                self._run(batch)
            finally:
                with self._changed:
                    self._running = False
                    self._changed.notify_all()

    def _take(self) -> list[_Request]:
        batch: list[_Request] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0].texts) <= self.max_batch):
            request = self._queue.pop(0)
            batch.append(request)
            size += len(request.texts)
        return batch

    def _run(self, batch: list[_Request]) -> None:
        texts = [t for r in batch for t in r.texts]
        try:
            rows = self.inner.embed(texts)
        except Exception as error:  # noqa: BLE001 - handed to every waiter, raised in each
            _finish(batch, error=error)
            return
        if rows.ndim != 2 or rows.shape[0] != len(texts):
            _finish(batch, error=EmbedderUnavailable(f"asked for {len(texts)} rows, got shape {rows.shape}"))
            return
        start = 0
        for r in batch:
            r.rows = np.array(rows[start : start + len(r.texts)])
            r.done = True
            start += len(r.texts)


def _finish(batch: list[_Request], error: Exception) -> None:
    for r in batch:
        r.error, r.done = error, True


def _result(request: _Request) -> Matrix:
    if request.error is not None:
        raise request.error
    assert request.rows is not None
    return request.rows
