"""The read side of ``assemble`` and ``fault`` (domain/services/working_sets.py): the
``WorkingSetReads`` port on the search index. It only reads: the service records what the
caller was shown."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.domain.model.identity import Identity
from memwarden.domain.ports import KnowledgeText, MemoryText, Scores
from memwarden.projections.search.drivers import BASELINE, SearchRequest
from memwarden.projections.search.service import SearchQuery, SearchService, check_query
from memwarden.projections.search.view import ScopedView


class SearchWorkingSets:
    """``WorkingSetReads`` on the search index; ``position``: how far it has projected."""

    def __init__(self, search: SearchService, position: Callable[[], int]) -> None:
        self.search = search
        self._position = position

    def check_query(self, text: str, k: int) -> None:
        check_query(SearchQuery(query=text, k=k))

    def wait_for(self, position: int | None) -> None:
        self.search.wait_for(position)

    def position(self) -> int:
        return self._position()

    @contextlib.contextmanager
    def scoped(self, identity: Identity, text: str, k: int, vectors: bool) -> Iterator[ScopedWorkingSet]:
        query = SearchQuery(query=text, k=k)
        serving = self.search.serving()
        vector = self.search.embed_later(text, serving) if vectors else None
        with self.search.view(identity, query, vector, serving) as (view, conn, _scope, _shared):
            yield ScopedWorkingSet(self.search, view, conn, text)


class ScopedWorkingSet:
    """``ScopedReads`` on one scoped view of the search index."""

    def __init__(self, search: SearchService, view: ScopedView, conn: Connection[Any], text: str) -> None:
        self.search = search
        self.view = view
        self.conn = conn
        self.text = text

    def pinned(self, namespace: str) -> list[MemoryText]:
        return [_memory_text(row) for row in self.view.pinned(namespace)]

    def recently_used(self, limit: int) -> list[MemoryText]:
        return [_memory_text(row) for row in self.view.recently_used(limit)]

    def relevant(self, driver: str | None, k: int) -> list[tuple[MemoryText, float]]:
        drivers = self.search.drivers
        found = drivers.get(driver or BASELINE, drivers[BASELINE]).search(
            self.view, SearchRequest(query=self.text, k=k)
        )
        rows = self.view.memory_rows([h.ref for h in found])
        return [(_memory_text(rows[h.ref]), h.score) for h in found if h.ref in rows]

    def memory_scores(self, k: int) -> Scores:
        refs = [h.ref for h in self.view.lexical_lane(k)]
        if self.view.has_vectors:
            refs += [h.ref for h in self.view.vector_lane(k)]
        return self.view.scores(list(dict.fromkeys(refs)))

    def knowledge_scores(self, k: int) -> Scores:
        return self.view.knowledge_scores(k)

    def memories(self, refs: Sequence[UUID]) -> Mapping[UUID, MemoryText]:
        return {ref: _memory_text(row) for ref, row in self.view.memory_rows(refs).items()}

    def knowledge(self, refs: Sequence[UUID]) -> Mapping[UUID, KnowledgeText]:
        rows = self.conn.execute(
            SQL(
                "SELECT c.ref, c.heading, c.text, d.title FROM {s}.knowledge_chunks c"
                " JOIN {s}.knowledge_documents d ON d.document_id = c.document_id WHERE c.ref = ANY(%s)"
            ).format(s=Identifier(self.search.ledger.schema)),
            (list(refs),),
        ).fetchall()
        return {r["ref"]: KnowledgeText(ref=r["ref"], text=r["text"], title=r["title"]) for r in rows}


def _memory_text(row: dict[str, Any]) -> MemoryText:
    return MemoryText(id=row["id"], content=row["content"], recorded_at=row["recorded_at"])
