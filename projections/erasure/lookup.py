"""Candidates of a subject or subtree erasure, from ``memory_objects`` (memories) and
``knowledge_documents`` (L3 documents, subtree erasure only), and the memories rejected in
review in favour of a version of an erased chain, from ``memory_supersedence``.

A hint only: the forget decider re-checks every candidate against the ledger's state.
The subtree is matched as ``namespace = root OR namespace LIKE <escaped root>/%``, so
``acme/eng`` never matches ``acme/engineering`` and ``_``, ``%``, ``\\`` match themselves.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import LiteralString
from uuid import UUID

from psycopg.sql import SQL, Identifier

from memwarden.domain.model.namespaces import subtree_like_pattern
from memwarden.projections.reads import ReadModels


class ProjectionErasureLookup:
    def __init__(self, reads: ReadModels) -> None:
        self.reads = reads

    def in_subtree(self, root: str, position: int) -> list[UUID]:
        return self._ids(
            "SELECT id FROM {s}.memory_objects WHERE (namespace = %s OR namespace LIKE %s ESCAPE '\\')"
            " AND status <> 'erased'",
            (root, subtree_like_pattern(root)),
            position,
        )

    def naming_subject(self, root: str, keys: frozenset[str], position: int) -> list[UUID]:
        """Memories whose subject, tags or selectors go by one of ``keys`` (GIN-indexed)."""
        return self._ids(
            "SELECT id FROM {s}.memory_objects WHERE erasure_keys && %s::text[]"
            " AND (namespace = %s OR namespace LIKE %s ESCAPE '\\') AND status <> 'erased'",
            (sorted(keys), root, subtree_like_pattern(root)),
            position,
        )

    def documents_in_subtree(self, root: str, position: int) -> list[UUID]:
        """The knowledge documents published in the subtree (an erased one has no row)."""
        return self._ids(
            "SELECT document_id AS id FROM {s}.knowledge_documents"
            " WHERE namespace = %s OR namespace LIKE %s ESCAPE '\\'",
            (root, subtree_like_pattern(root)),
            position,
        )

    def rejected_in_favour_of(self, memory_ids: Collection[UUID], position: int) -> list[UUID]:
        """The memories a ``keep_old`` review rejected in favour of one of ``memory_ids``
        (the ``rejected`` edges ``history`` shows, indexed by the kept memory)."""
        return self._ids(
            "SELECT old_id AS id FROM {s}.memory_supersedence WHERE new_id = ANY(%s) AND kind = 'rejected'",
            (list(memory_ids),),
            position,
        )

    def _ids(self, query: LiteralString, params: tuple[object, ...], position: int) -> list[UUID]:
        """The ``id`` column of a query over read models that have reached ``position``."""
        self.reads.wait_for(position)
        statement = SQL(query).format(s=Identifier(self.reads.ledger.schema))
        with self.reads.ledger.datastore.get_connection() as conn:
            rows = conn.execute(statement, params).fetchall()
        return [row["id"] for row in rows]

    def proposals_drafted_from(self, memory_ids: Collection[UUID], position: int) -> list[UUID]:
        """The consolidation proposals with one of ``memory_ids`` among their sources."""
        return self._ids(
            "SELECT id FROM {s}.proposals WHERE sources && %s::uuid[]", (list(memory_ids),), position
        )
