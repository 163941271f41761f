"""Roots and proofs from the stored tree: each answer reads the O(log n) nodes it needs in one
query, after the tree has reached the size asked for."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
from eventsourcing.postgres import PostgresDatastore

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.merkle import (
    consistency_proof,
    inclusion_proof,
    nodes_for_consistency,
    nodes_for_inclusion,
    nodes_for_root,
    root,
)
from memwarden.projections.merkle.projection import load_nodes


class InclusionProof(msgspec.Struct, frozen=True, kw_only=True):
    """Ledger position ``position`` is leaf ``leaf_index`` of the tree of ``size`` leaves."""

    position: int
    leaf_index: int
    size: int
    leaf_hash: bytes
    root: bytes
    proof: list[bytes]


class ConsistencyProof(msgspec.Struct, frozen=True, kw_only=True):
    """The tree of ``first`` leaves is a prefix of the tree of ``second``."""

    first: int
    second: int
    first_root: bytes
    second_root: bytes
    proof: list[bytes]


class TreeReads:
    def __init__(
        self,
        datastore: PostgresDatastore,
        schema: str,
        wait_for: Callable[[int], None],
        head: Callable[[], int],
    ) -> None:
        self.datastore = datastore
        self.schema = schema
        self.wait_for = wait_for
        self.head = head

    def _reached(self, size: int) -> None:
        head = self.head()
        if not 1 <= size <= head:
            raise InvalidRequest(f"size must be between 1 and the ledger's {head} events")
        self.wait_for(size)

    def root(self, size: int) -> bytes:
        self._reached(size)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            nodes = load_nodes(curs, self.schema, nodes_for_root(size))
        return root(size, nodes)

    def inclusion(self, position: int, size: int) -> InclusionProof:
        if not 1 <= position <= size:
            raise InvalidRequest(f"position must be between 1 and the size ({size})")
        self._reached(size)
        index = position - 1
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            nodes = load_nodes(
                curs, self.schema, nodes_for_inclusion(index, size) | nodes_for_root(size) | {(0, index)}
            )
        return InclusionProof(
            position=position,
            leaf_index=index,
            size=size,
            leaf_hash=nodes[(0, index)],
            root=root(size, nodes),
            proof=inclusion_proof(index, size, nodes),
        )

    def consistency(self, first: int, second: int) -> ConsistencyProof:
        if not 1 <= first <= second:
            raise InvalidRequest("from must be at least 1 and at most to")
        self._reached(second)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            nodes = load_nodes(curs, self.schema, nodes_for_consistency(first, second))
        return ConsistencyProof(
            first=first,
            second=second,
            first_root=root(first, nodes),
            second_root=root(second, nodes),
            proof=consistency_proof(first, second, nodes),
        )
