"""Candidates of a subject or subtree erasure, from ``memory_objects`` (memories) and
``knowledge_documents`` (L3 documents, subtree erasure only).

A hint only: the forget decider re-checks every candidate against the ledger's state.
The subtree is matched as ``namespace = root OR namespace LIKE <escaped root>/%``, so
``acme/eng`` never matches ``acme/engineering`` and ``_``, ``%``, ``\\`` match themselves.
"""

from __future__ import annotations

from uuid import UUID

from psycopg.sql import SQL, Identifier

from domain.model.namespaces import subtree_like_pattern
from projections.reads import ReadModels


class ProjectionErasureLookup:
    def __init__(self, reads: ReadModels) -> None:
        self.reads = reads

    def in_subtree(self, root: str, position: int) -> list[UUID]:
        self.reads.wait_for(position)
        query = SQL(
            "SELECT id FROM {s}.memory_objects WHERE (namespace = %s OR namespace LIKE %s ESCAPE '\\')"
            " AND status <> 'erased'"
        ).format(s=Identifier(self.reads.ledger.schema))
        with self.reads.ledger.datastore.get_connection() as conn:
            rows = conn.execute(query, (root, subtree_like_pattern(root))).fetchall()
        return [row["id"] for row in rows]

    def naming_subject(self, root: str, keys: frozenset[str], position: int) -> list[UUID]:
        """Memories whose subject, tags or selectors go by one of ``keys`` (GIN-indexed)."""
        self.reads.wait_for(position)
        query = SQL(
            "SELECT id FROM {s}.memory_objects WHERE erasure_keys && %s::text[]"
            " AND (namespace = %s OR namespace LIKE %s ESCAPE '\\') AND status <> 'erased'"
        ).format(s=Identifier(self.reads.ledger.schema))
        with self.reads.ledger.datastore.get_connection() as conn:
            rows = conn.execute(query, (sorted(keys), root, subtree_like_pattern(root))).fetchall()
        return [row["id"] for row in rows]

    def documents_in_subtree(self, root: str, position: int) -> list[UUID]:
        """The knowledge documents published in the subtree (an erased one has no row)."""
        self.reads.wait_for(position)
        query = SQL(
            "SELECT document_id FROM {s}.knowledge_documents"
            " WHERE namespace = %s OR namespace LIKE %s ESCAPE '\\'"
        ).format(s=Identifier(self.reads.ledger.schema))
        with self.reads.ledger.datastore.get_connection() as conn:
            rows = conn.execute(query, (root, subtree_like_pattern(root))).fetchall()
        return [row["document_id"] for row in rows]
