"""Group commit: concurrent appends in one process share one ledger transaction.

Leader/follower: every writer queues its group and then takes the commit lock; the
writer that holds it appends everything queued so far in one call. Writers whose group
a previous leader already committed find it done and return at once. The table lock in
PostgreSQL serializes appends anyway, so batching turns N lock waits and N fsyncs into one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

G = TypeVar("G")
R = TypeVar("R")

MAX_GROUPS_PER_COMMIT = 256


class _Pending(Generic[G, R]):
    __slots__ = ("error", "group", "result")

    def __init__(self, group: G) -> None:
        self.group = group
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommitter(Generic[G, R]):
    def __init__(self, commit: Callable[[Sequence[G]], list[R]]) -> None:
        self._commit = commit
        self._queue: list[_Pending[G, R]] = []
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()

    def submit(self, group: G) -> R:
        pending: _Pending[G, R] = _Pending(group)
        with self._queue_lock:
            self._queue.append(pending)
        with self._commit_lock:
            if pending.result is None and pending.error is None:
                self._lead()
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def _lead(self) -> None:
        with self._queue_lock:
            batch = self._queue[:MAX_GROUPS_PER_COMMIT]
            del self._queue[:MAX_GROUPS_PER_COMMIT]
        try:
            results = self._commit([p.group for p in batch])
        except BaseException as error:  # every writer of the batch learns of the failure
            for p in batch:
                p.error = error
            raise
        for p, result in zip(batch, results, strict=True):
            p.result = result
