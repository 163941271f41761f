"""The autopilot's ``Neighbours`` port and the write's ``Similar`` (domain/services/ports.py,
domain/services/band.py), on the search index.

A memory's neighbours are found with the vector lane of the same scoped view a search
uses, with the memory's own stored embedding as the query (never re-embedded), in the
scope of the memory's writer: its namespace, the ancestors and what is shared into it;
current memories only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import numpy as np
from psycopg.sql import SQL, Identifier

from domain.embedding.base import vector_from_bytes
from domain.model.identity import Identity
from projections.search.service import SearchQuery, SearchService


class SearchNeighbours:
    def __init__(self, search: SearchService, wait_for: Callable[[int | None], None]) -> None:
        self.search = search
        self.wait_for = wait_for

    def _stored(self, memory_id: UUID) -> tuple[str, np.ndarray[Any, Any]] | None:
        """The memory's namespace and embedding, if the index holds one of the current model."""
        model = self.search.vector_model
        if model is None:
            return None
        ledger = self.search.ledger
        with ledger.datastore.get_connection() as conn:
            row = conn.execute(
                SQL(
                    "SELECT namespace, embedding::text AS vector FROM {s}.search_docs"
                    " WHERE ref = %s AND model = %s AND embedding IS NOT NULL"
                ).format(s=Identifier(ledger.schema)),
                (memory_id, model[0]),
            ).fetchone()
        if row is None:
            return None
        vector = np.array([float(x) for x in row["vector"].strip("[]").split(",")], dtype=np.float32)
        return row["namespace"], vector

    def nearest(
        self, memory_id: UUID, k: int, min_cosine: float, position: int
    ) -> list[tuple[UUID, float]] | None:
        self.wait_for(position)
        stored = self._stored(memory_id)
        if stored is None:
            return None
        namespace, vector = stored
        writer = Identity(namespace=namespace, actor="autopilot", role="agent")
        with self.search.view(writer, SearchQuery(query="", k=k), lambda: vector) as (view, *_):
            hits = view.vector_lane(k + 1)
        return [(h.ref, h.score) for h in hits if h.ref != memory_id and h.score >= min_cosine][:k]

    def similar(self, namespace: str, vector: bytes, k: int, min_cosine: float) -> list[tuple[UUID, float]]:
        """The synchronous band's neighbours: nearest to a new fact's vector among the
        current memories its writer can see (twice ``k``: the band keeps those of
        ``namespace`` itself)."""
        if self.search.vector_model is None:
            return []
        query = vector_from_bytes(vector)
        writer = Identity(namespace=namespace, actor="autopilot", role="agent")
        with self.search.view(writer, SearchQuery(query="", k=k), lambda: query) as (view, *_):
            hits = view.vector_lane(2 * k)
        return [(h.ref, h.score) for h in hits if h.score >= min_cosine]
