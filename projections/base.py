"""What a projection is: tables it owns, and a handler for a batch of ledger events."""

from __future__ import annotations

from typing import Any, Protocol

from psycopg import Cursor

from domain.ledger.mapper import Recorded


class Projection(Protocol):
    """A read model that can be dropped and rebuilt from the ledger.

    ``name`` keys its tracking record; ``tables`` lists what it owns (dropped on rebuild).
    """

    @property
    def name(self) -> str: ...

    @property
    def tables(self) -> tuple[str, ...]: ...

    def create(self, curs: Cursor[Any], schema: str) -> None: ...

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None: ...
