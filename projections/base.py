"""What a projection is: tables it owns, and a handler for a batch of ledger events."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from psycopg import Cursor
from psycopg.sql import Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import Event

EventHandler = Callable[[Cursor[Any], Identifier, Recorded], None]
"""Applies one recorded event to a projection's tables in a schema (the ``Identifier``)."""

HandlerMap = Mapping[type[Event], EventHandler]
"""Which handler applies an event, keyed by the event's exact type (``type(event)``)."""


class Projection(Protocol):
    """A read model that can be dropped and rebuilt from the ledger.

    ``name`` keys its tracking record; ``tables`` lists what it owns (dropped on rebuild).
    ``create`` makes those tables, as they are now, in a rebuild's shadow schema; the live
    ones are made by the numbered migrations (bootstrap/migrations), and a test checks the
    two agree.
    """

    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> tuple[str, ...]: ...

    def create(self, curs: Cursor[Any], schema: str) -> None: ...

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None: ...


@runtime_checkable
class DeferredIndexes(Projection, Protocol):
    """A projection with an index far cheaper to build once over all its rows than to keep
    up row by row (an HNSW graph). A runner far behind the ledger drops it, catches up
    without it, and builds it again once near the head; the tables' rows are the same
    either way, only queries run without the index meanwhile."""

    def defer_indexes(self, curs: Cursor[Any], schema: str, backlog: int) -> bool:
        """Drop the index if ``backlog`` events make a build cheaper; True if dropped."""
        ...

    def indexes_deferred(self, curs: Cursor[Any], schema: str) -> bool:
        """Is an index missing (dropped by a catch-up, here or in another process)?"""
        ...

    def build_indexes(self, curs: Cursor[Any], schema: str) -> None:
        """Build what is missing (nothing if nothing is)."""
        ...
