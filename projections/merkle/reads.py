"""Roots and proofs from the stored tree: each answer reads the few tiles its O(log n) nodes lie
in, in one round trip on one connection, after the tree has reached the size asked for (known
without a query once this process has seen the read models pass it)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from eventsourcing.postgres import PostgresDatastore
from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.model.errors import InvalidRequest, NotFound
from memwarden.domain.model.merkle import (
    NodeKey,
    Nodes,
    consistency_proof,
    inclusion_proof,
    nodes_for_consistency,
    nodes_for_inclusion,
    nodes_for_root,
    root,
)
from memwarden.domain.model.merkle_tiles import TileKey, TileNodes, tiles_for
from memwarden.projections.merkle.projection import load_tiles, tenant_size
from memwarden.projections.merkle.records import RECORD_COLUMNS, record_of


class InclusionProof(msgspec.Struct, frozen=True, kw_only=True):
    """Ledger position ``position`` is leaf ``leaf_index`` of the tree of ``size`` leaves."""

    position: int
    leaf_index: int
    size: int
    leaf_hash: bytes
    root: bytes
    proof: list[bytes]
    record: bytes
    """The leaf's preimage: the position's canonical record (``records.record_of``)."""


class ConsistencyProof(msgspec.Struct, frozen=True, kw_only=True):
    """The tree of ``first`` leaves is a prefix of the tree of ``second``."""

    first: int
    second: int
    first_root: bytes
    second_root: bytes
    proof: list[bytes]


class TreeReads:
    """The ledger's tree (``tree`` None) or, with a chain per tenant, a tenant's."""

    def __init__(
        self,
        datastore: PostgresDatastore,
        schema: str,
        wait_for: Callable[[int], None],
        head: Callable[[], int],
        reached: Callable[[], int] = lambda: 0,
    ) -> None:
        self.datastore = datastore
        self.schema = schema
        self.wait_for = wait_for
        self.head = head
        self.reached = reached
        """A position every read model is known (by this process) to have reached."""

    def size(self, tree: str | None = None) -> int:
        """How many leaves the tree holds once the read models reach the ledger head."""
        head = self.head()
        self.wait_for(head)
        if tree is None:
            return head
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            return tenant_size(curs, self.schema, tree)

    def _reached(self, size: int, tree: str | None) -> None:
        if tree is None:
            if 1 <= size <= self.reached():  # the tree holds it: no head to ask for
                return
            head = self.head()
            if not 1 <= size <= head:
                raise InvalidRequest(f"size must be between 1 and the ledger's {head} events")
            self.wait_for(size)
            return
        held = self.size(tree)
        if not 1 <= size <= held:
            raise InvalidRequest(f"size must be between 1 and the tenant tree's {held} events")

    def _nodes(self, keys: set[NodeKey], tree: str | None) -> Nodes:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            return _tile_nodes(curs, self.schema, keys, tree)

    def root(self, size: int, tree: str | None = None) -> bytes:
        self._reached(size, tree)
        return root(size, self._nodes(nodes_for_root(size), tree))

    def inclusion(self, position: int, size: int, tree: str | None = None) -> InclusionProof:
        if position < 1:
            raise InvalidRequest("position must be at least 1")
        self._reached(size, tree)
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            if tree is None and position <= size:  # the leaf is known: its row and tiles in one query
                wanted = tiles_for(_inclusion_keys(position - 1, size))
                row, tiles = _event_and_tiles(curs, self.schema, position, wanted)
            else:
                curs.execute(SQL(_EVENT).format(s=Identifier(self.schema)), (position,), prepare=True)
                row = curs.fetchone()
                index = _leaf_index(row, position, tree)
                if index is None:
                    raise NotFound("no such record in this tree")
                if index >= size:
                    raise InvalidRequest(f"position {position} is after the tree of {size} events")
                wanted = tiles_for(_inclusion_keys(index, size))
                tiles = {
                    key: tile
                    for (_, key), tile in load_tiles(curs, self.schema, {(tree, k) for k in wanted}).items()
                }
        index = _leaf_index(row, position, tree)
        assert index is not None
        nodes = TileNodes(tiles)
        return InclusionProof(
            position=position,
            leaf_index=index,
            size=size,
            leaf_hash=nodes[(0, index)],
            root=root(size, nodes),
            proof=inclusion_proof(index, size, nodes),
            record=record_of(row) if row is not None else b"",
        )

    def consistency(self, first: int, second: int, tree: str | None = None) -> ConsistencyProof:
        if not 1 <= first <= second:
            raise InvalidRequest("from must be at least 1 and at most to")
        self._reached(second, tree)
        nodes = self._nodes(nodes_for_consistency(first, second), tree)
        return ConsistencyProof(
            first=first,
            second=second,
            first_root=root(first, nodes),
            second_root=root(second, nodes),
            proof=consistency_proof(first, second, nodes),
        )


_EVENT = "SELECT " + RECORD_COLUMNS + ", tenant, tenant_position FROM {s}.events WHERE notification_id = %s"

_EVENT_AND_TILES = (
    "SELECT k.levels, k.idxs, k.tiles, e.* FROM (SELECT array_agg(t.level) AS levels,"
    " array_agg(t.idx) AS idxs, array_agg(t.hashes) AS tiles FROM {s}.merkle_tiles t"
    " JOIN unnest(%s::smallint[], %s::bigint[]) AS w(level, idx) ON t.level = w.level AND t.idx = w.idx) k"
    " LEFT JOIN (" + _EVENT + ") e ON true"
)
"""One row whatever is found: the tiles asked for as three arrays, and the event's columns
(NULL when there is no such position)."""


def _event_and_tiles(
    curs: Cursor[Any], schema: str, position: int, wanted: set[TileKey]
) -> tuple[Mapping[str, Any] | None, dict[TileKey, bytes]]:
    """Ledger ``position``'s events row and the ledger tree's tiles ``wanted``, in one query."""
    keys = sorted(wanted)
    curs.execute(
        SQL(_EVENT_AND_TILES).format(s=Identifier(schema)),
        ([level for level, _ in keys], [index for _, index in keys], position),
        prepare=True,
        binary=True,
    )
    found = curs.fetchone()
    assert found is not None  # an aggregate: always one row
    stored = zip(found["levels"] or (), found["idxs"] or (), found["tiles"] or (), strict=True)
    tiles = {(int(level), int(index)): bytes(tile) for level, index, tile in stored}
    return (found if found["notification_id"] is not None else None), tiles


def _inclusion_keys(index: int, size: int) -> set[NodeKey]:
    return nodes_for_inclusion(index, size) | nodes_for_root(size) | {(0, index)}


def _tile_nodes(curs: Cursor[Any], schema: str, keys: set[NodeKey], tree: str | None) -> Nodes:
    """The nodes ``keys`` name, from the tiles they lie in (one query)."""
    tiles = load_tiles(curs, schema, {(tree, key) for key in tiles_for(keys)})
    return TileNodes({key: tile for (_, key), tile in tiles.items()})


def _leaf_index(row: Mapping[str, Any] | None, position: int, tree: str | None) -> int | None:
    """The leaf of ledger ``position`` (its events ``row``) in ``tree``: position - 1 in the
    ledger's tree; in a tenant's, its tenant position - 1, or None when the event is another
    tenant's (denied and missing look the same)."""
    if tree is None:
        return position - 1
    if row is None or row["tenant"] != tree or row["tenant_position"] is None:
        return None
    return int(row["tenant_position"]) - 1
