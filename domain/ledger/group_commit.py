"""Group commit: concurrent appends in one process share one ledger transaction.

Every writer queues its group. When no commit is in flight, the writer that notices
becomes the leader: it takes everything queued so far and appends it in one call, while
new writers keep queueing behind it. Followers sleep on a condition until their group is
done, so a commit wakes them all at once instead of passing a lock from one to the next.
The ledger's lock in PostgreSQL serializes appends anyway; batching turns N lock waits,
N round trips and N fsyncs into one.

With a chain per tenant (``MEMWARDEN_LEDGER_CHAINS=tenant``) there is one committer per
tenant (``CommitterPerKey``): a tenant's writers share its commits, and two tenants'
commits run at once, since in the database they no longer wait on one lock (PostgreSQL
then flushes their commits to the WAL together).

A commit that failed because the database is down (``fails_queue``) fails the writers
queued behind it too: they would each wait for the same database again, one timeout
after another, instead of answering at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

G = TypeVar("G")
R = TypeVar("R")

MAX_GROUPS_PER_COMMIT = 256


class _Pending(Generic[G, R]):
    __slots__ = ("done", "error", "group", "result")

    def __init__(self, group: G) -> None:
        self.group = group
        self.result: R | None = None
        self.error: BaseException | None = None
        self.done = False


class GroupCommitter(Generic[G, R]):
    def __init__(
        self,
        commit: Callable[[Sequence[G]], list[R]],
        fails_queue: Callable[[BaseException], bool] = lambda _error: False,
    ) -> None:
        self._commit = commit
        self._fails_queue = fails_queue
        self._queue: list[_Pending[G, R]] = []
        self._changed = threading.Condition()
        self._committing = False

    def submit(self, group: G) -> R:
        pending: _Pending[G, R] = _Pending(group)
        with self._changed:
            self._queue.append(pending)
        while True:
            with self._changed:
                while not pending.done and self._committing:
                    self._changed.wait()
                if pending.done:
                    return self._outcome(pending)
                self._committing = True
                batch = self._queue[:MAX_GROUPS_PER_COMMIT]
                del self._queue[:MAX_GROUPS_PER_COMMIT]
            self._lead(batch)

    def _lead(self, batch: list[_Pending[G, R]]) -> None:
        try:
            results = self._commit([p.group for p in batch])
        except BaseException as error:  # noqa: BLE001 - handed to every writer of the batch
            for p in batch:
                p.error = error
            if self._fails_queue(error):
                with self._changed:
                    queued, self._queue = self._queue, []
                for p in queued:
                    p.error = error
                batch = batch + queued
        else:
            for p, result in zip(batch, results, strict=True):
                p.result = result
        with self._changed:
            for p in batch:
                p.done = True
            self._committing = False
            self._changed.notify_all()

    @staticmethod
    def _outcome(pending: _Pending[G, R]) -> R:
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result


class CommitterPerKey(Generic[G, R]):
    """A ``GroupCommitter`` per key, made (``make``) at the key's first group: groups of one
    key share commits; groups of two keys are committed concurrently."""

    def __init__(self, make: Callable[[], GroupCommitter[G, R]]) -> None:
        self._make = make
        self._committers: dict[str, GroupCommitter[G, R]] = {}
        self._made = threading.Lock()

    def submit(self, key: str, group: G) -> R:
        committer = self._committers.get(key)
        if committer is None:
            with self._made:
                committer = self._committers.get(key)
                if committer is None:
                    committer = self._make()
                    self._committers[key] = committer
        return committer.submit(group)
