"""When a runner drops the indexes cheaper to build once, and when it builds them again.

A runner far behind the ledger lets each ``DeferredIndexes`` projection drop such an index
(an HNSW graph) before a full batch, catches up without it, and builds it again in a
transaction of its own once a batch comes back short (near the head). Another runner (in
this process or another) may have left one deferred: near the head, at most once a
second, a runner asks whether an index is missing and builds it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container, Sequence
from typing import Any

from psycopg import Cursor

from memwarden.domain.ledger import locks
from memwarden.domain.ledger.app import Ledger
from memwarden.projections.base import DeferredIndexes, Projection

log = logging.getLogger(__name__)

DEFERRED_CHECK_SECONDS = 1.0
"""How often a runner near the head asks whether another runner left an index deferred."""


class DeferredIndexPolicy:
    """The deferral decisions of one runner; ``stopped`` is always the names of the
    projections the runner no longer applies (their indexes are left alone)."""

    def __init__(self, ledger: Ledger, projections: Sequence[Projection]) -> None:
        self.ledger = ledger
        self.schema = ledger.schema
        self.pending = False
        """An index is (probably) missing: build at the next batch near the head."""
        # an isinstance check against a runtime protocol is slow: the candidates are found once
        self._candidates = [p for p in projections if isinstance(p, DeferredIndexes)]
        self._next_check = 0.0

    def deferring(self, stopped: Container[str]) -> list[DeferredIndexes]:
        """The live projections with deferrable indexes."""
        return [p for p in self._candidates if p.name not in stopped]

    def before_far_batch(self, curs: Cursor[Any], start: int, stopped: Container[str]) -> None:
        """A full batch: if the ledger is far ahead, let projections drop what is cheaper to
        build once at the end than to keep up row by row."""
        deferring = self.deferring(stopped)
        if deferring:
            backlog = self.ledger.head_position() - start
            for projection in deferring:
                if projection.defer_indexes(curs, self.schema, backlog):
                    self.pending = True  # (a no-op if this batch rolls back)

    def after_near_batch(self, curs: Cursor[Any], stopped: Container[str]) -> None:
        """A short batch: at most once a second, ask whether any runner left an index to build."""
        if self._check_due():
            self.pending = self.pending or any(
                p.indexes_deferred(curs, self.schema) for p in self.deferring(stopped)
            )

    def build_pending(self, stopped: Container[str]) -> None:
        """Build deferred indexes in a transaction of their own, after the batch committed
        (readers already see its rows), holding the runners' lock so no batch runs meanwhile."""
        try:
            with self.ledger.datastore.get_connection() as conn, conn.transaction():
                if not locks.try_hold(conn, locks.PROJECTIONS):  # a runner is applying: after the next batch
                    return
                self.pending = False
                with conn.cursor() as curs:
                    for projection in self.deferring(stopped):
                        began = time.perf_counter()
                        projection.build_indexes(curs, self.schema)
                        took = time.perf_counter() - began
                        log.info("deferred indexes of %s built in %.1f s", projection.name, took)
        except Exception:
            self.pending = False  # checked again at the next batch near the head
            log.exception("building deferred indexes failed")

    def _check_due(self) -> bool:
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + DEFERRED_CHECK_SECONDS
        return True
