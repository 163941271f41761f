"""The autopilot's ``Neighbours`` port and the write's ``Similar`` (domain/ports.py,
domain/services/band.py), on the search index.

A memory's neighbours are found with the vector lane of the same scoped view a search
uses, with the memory's own stored embedding as the query (never re-embedded), in the
scope of the memory's writer: its namespace, the ancestors and what is shared into it;
current memories only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import numpy as np
from psycopg.sql import SQL, Identifier

from memwarden.domain.embedding.base import vector_from_bytes
from memwarden.domain.model.identity import Identity
from memwarden.projections.search.service import SearchQuery, SearchService, Serving
from memwarden.projections.search.view import Hit


class SearchNeighbours:
    def __init__(self, search: SearchService, wait_for: Callable[[int | None], None]) -> None:
        self.search = search
        self.wait_for = wait_for

    def _stored(
        self, memory_ids: Sequence[UUID], model: tuple[str, int] | None
    ) -> dict[UUID, tuple[str, np.ndarray[Any, Any]]]:
        """Each memory's namespace and embedding, where the index holds one of the served
        ``model``; one query for them all."""
        if model is None or not memory_ids:
            return {}
        ledger = self.search.ledger
        with ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL(
                    "SELECT ref, namespace, embedding::text AS vector FROM {s}.search_docs"
                    " WHERE ref = ANY(%s) AND model = %s AND embedding IS NOT NULL"
                ).format(s=Identifier(ledger.schema)),
                (list(memory_ids), model[0]),
            ).fetchall()
        return {
            r["ref"]: (r["namespace"], np.fromstring(r["vector"].strip("[]"), dtype=np.float32, sep=","))
            for r in rows
        }

    def nearest(
        self, memory_id: UUID, k: int, min_cosine: float, position: int
    ) -> list[tuple[UUID, float]] | None:
        return self.nearest_many([memory_id], k, min_cosine, position).get(memory_id)

    def nearest_many(
        self, memory_ids: Sequence[UUID], k: int, min_cosine: float, position: int
    ) -> dict[UUID, list[tuple[UUID, float]]]:
        self.wait_for(position)
        serving = self.search.serving()
        by_namespace: dict[str, list[tuple[UUID, np.ndarray[Any, Any]]]] = {}
        for memory_id, (namespace, vector) in self._stored(memory_ids, serving.model).items():
            by_namespace.setdefault(namespace, []).append((memory_id, vector))
        found: dict[UUID, list[tuple[UUID, float]]] = {}
        for namespace, members in by_namespace.items():
            lanes = self._lanes(namespace, [vector for _, vector in members], k + 1, serving)
            for (memory_id, _), hits in zip(members, lanes, strict=True):
                found[memory_id] = [
                    (h.ref, h.score) for h in hits if h.ref != memory_id and h.score >= min_cosine
                ][:k]
        return found

    def positions(self, memory_ids: Sequence[UUID]) -> dict[UUID, int]:
        if not memory_ids:
            return {}
        ledger = self.search.ledger
        with ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT ref, position FROM {s}.search_docs WHERE ref = ANY(%s)").format(
                    s=Identifier(ledger.schema)
                ),
                (list(memory_ids),),
            ).fetchall()
        return {r["ref"]: int(r["position"]) for r in rows}

    def similar(
        self, namespace: str, vectors: Sequence[bytes], k: int, min_cosine: float, model: str | None = None
    ) -> list[list[tuple[UUID, float]]]:
        """The synchronous band's neighbours: for each new fact's vector (of ``model``), the
        nearest current memories its writer can see (twice ``k``: the band keeps those of
        ``namespace`` itself), all facts of a write in one lookup. Nothing when the index
        serves another model."""
        serving = self.search.serving()
        if serving.model is None or (model is not None and model != serving.model[0]):
            return [[] for _ in vectors]
        lanes = self._lanes(namespace, [vector_from_bytes(v) for v in vectors], 2 * k, serving)
        return [[(h.ref, h.score) for h in hits if h.score >= min_cosine] for hits in lanes]

    def _lanes(
        self, namespace: str, vectors: Sequence[np.ndarray[Any, Any]], k: int, serving: Serving
    ) -> list[list[Hit]]:
        """The vector lane of each of ``vectors`` in the scope of a writer of ``namespace``,
        by the ``serving`` model: one view, one round trip."""
        writer = Identity(namespace=namespace, actor="autopilot", role="agent")
        with self.search.view(writer, SearchQuery(query="", k=k), _per_memory, serving) as (view, *_):
            return view.vector_lanes(vectors, k)


def _per_memory() -> np.ndarray[Any, Any]:
    """The query vector of a view whose every lookup brings its own (``for_vector``)."""
    raise LookupError("each lookup of this view brings its own vector")
