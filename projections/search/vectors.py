"""The re-embedding pass's ``VectorIndex`` port (domain/ports.py), on the search
index: the model it serves, and the memories that lack a vector of a model.

A memory lacks a vector of a model when the index holds its text (``search_docs``, kind
memory: it has content and is not erased) and neither ``search_docs`` (in service) nor
``search_vectors`` (aside) holds one of that model for it (projections/search/projection.py).
"""

from __future__ import annotations

from collections.abc import Callable

from psycopg.sql import SQL, Identifier, Literal

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ports import Lacking
from memwarden.projections.search.projection import MEMORY, serving_of

_LACKING = (
    "FROM {s}.search_docs d WHERE d.kind = {kind} AND d.model IS DISTINCT FROM %(m)s"
    " AND NOT EXISTS (SELECT 1 FROM {s}.search_vectors v WHERE v.ref = d.ref AND v.model = %(m)s)"
)


class SearchVectorIndex:
    def __init__(self, ledger: Ledger, wait_for: Callable[[int | None], None]) -> None:
        self.ledger = ledger
        self._wait_for = wait_for

    def wait_for(self, position: int | None) -> None:
        self._wait_for(position)

    def serving(self) -> tuple[str, int] | None:
        with self.ledger.datastore.get_connection() as conn, conn.cursor() as curs:
            return serving_of(curs, self.ledger.schema)

    def lacking(self, model: str, after: int, limit: int) -> list[Lacking]:
        query = SQL(
            "SELECT d.ref, d.namespace, d.position " + _LACKING + " AND d.position > %(after)s"
            " ORDER BY d.position LIMIT %(limit)s"
        ).format(s=Identifier(self.ledger.schema), kind=Literal(MEMORY))
        with self.ledger.datastore.get_connection() as conn:
            rows = conn.execute(query, {"m": model, "after": after, "limit": limit}).fetchall()
        return [Lacking(r["ref"], r["namespace"], int(r["position"])) for r in rows]

    def count_lacking(self, model: str) -> int:
        query = SQL("SELECT count(*) AS n " + _LACKING)
        with self.ledger.datastore.get_connection() as conn:
            row = conn.execute(
                query.format(s=Identifier(self.ledger.schema), kind=Literal(MEMORY)), {"m": model}
            ).fetchone()
        return int(row["n"]) if row else 0
