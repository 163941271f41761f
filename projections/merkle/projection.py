"""The ``merkle`` read model: the tree's nodes as tiles (domain/model/merkle_tiles.py). Each
batch hashes its events' rows as leaves (the chain's canonical form, ciphertext: an erased
memory's leaf stays and still proves its place), reads the edge tiles of the tree before it
and writes the tiles the leaves fill (one statement for each table). The rows come with the
events the runner read (``Recorded.row``); only events without them are read again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.chain import canonical
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.merkle import leaf_hash
from memwarden.domain.model.merkle_tiles import TileKey, edge_tiles, grown, size_of
from memwarden.domain.settings import SCHEMA
from memwarden.projections.merkle.records import RECORD_COLUMNS, record_of

Tree = str | None
"""The ledger's tree (None) or a tenant's."""


class MerkleProjection:
    name = "merkle"
    tables = ("merkle_tiles", "merkle_tenant_tiles")

    def __init__(self, ledger_schema: str = SCHEMA) -> None:
        self.ledger_schema = ledger_schema

    def create(self, curs: Cursor[Any], schema: str) -> None:
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {s}.merkle_tiles (level smallint NOT NULL, idx bigint NOT NULL,"
                " hashes bytea NOT NULL, PRIMARY KEY (level, idx))"
            ).format(s=Identifier(schema))
        )
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {s}.merkle_tenant_tiles (tenant text NOT NULL, level smallint NOT NULL,"
                " idx bigint NOT NULL, hashes bytea NOT NULL, PRIMARY KEY (tenant, level, idx))"
            ).format(s=Identifier(schema))
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        first, last = int(events[0].position or 0), int(events[-1].position or 0)
        records = _handed(events) or self._records(curs, first, last)
        if [r.position for r in records] != list(range(first, last + 1)):
            raise LookupError(f"the ledger's positions {first}..{last} are not all there to hash")
        leaves = [leaf_hash(r.record) for r in records]
        growing: dict[Tree, tuple[int, list[bytes]]] = {None: (first - 1, leaves)}
        growing.update(_by_tenant(records, leaves))
        edges = load_tiles(
            curs, schema, {(tree, key) for tree, (size, _) in growing.items() for key in edge_tiles(size)}
        )
        written: dict[tuple[Tree, TileKey], bytes] = {}
        for tree, (size, own) in growing.items():
            edge = {key: tile for (t, key), tile in edges.items() if t == tree}
            written.update(((tree, key), tile) for key, tile in grown(size, edge, own).items())
        _store(curs, schema, written)

    def _records(self, curs: Cursor[Any], first: int, last: int) -> list[LedgerRecord]:
        curs.execute(
            SQL(
                "SELECT " + RECORD_COLUMNS + ", tenant, tenant_position"
                " FROM {s}.events WHERE notification_id BETWEEN %s AND %s ORDER BY notification_id"
            ).format(s=Identifier(self.ledger_schema)),
            (first, last),
        )
        return [
            LedgerRecord(
                position=int(row["notification_id"]),
                record=record_of(row),
                tenant=row["tenant"],
                tenant_position=row["tenant_position"],
            )
            for row in curs.fetchall()
        ]


class LedgerRecord(NamedTuple):
    position: int
    record: bytes
    """The chain's canonical form of the event (ciphertext included)."""
    tenant: str | None
    """With a chain per tenant: whose; None on a single chain."""
    tenant_position: int | None


def _handed(events: list[Recorded]) -> list[LedgerRecord] | None:
    """The batch's records from the rows its events were read from; None when one lacks its
    row (read otherwise): the projection reads them itself."""
    records: list[LedgerRecord] = []
    for e in events:
        row = e.row
        if row is None or e.position is None:
            return None
        record = canonical(e.position, e.originator_id, e.originator_version, row.topic, row.state)
        records.append(LedgerRecord(e.position, record, row.tenant, row.tenant_position))
    return records


def _by_tenant(records: list[LedgerRecord], leaves: list[bytes]) -> dict[Tree, tuple[int, list[bytes]]]:
    """Each tenant's (its tree's size before the batch, its leaf hashes in the batch in order)."""
    found: dict[str, list[tuple[int, bytes]]] = {}
    for r, leaf in zip(records, leaves, strict=True):
        if r.tenant is not None and r.tenant_position is not None:
            found.setdefault(r.tenant, []).append((r.tenant_position - 1, leaf))
    growing: dict[Tree, tuple[int, list[bytes]]] = {}
    for tenant, own in found.items():
        own.sort()
        indexes = [index for index, _ in own]
        if indexes != list(range(indexes[0], indexes[0] + len(indexes))):
            raise LookupError(f"tenant {tenant!r}: its positions in this batch are not consecutive")
        growing[tenant] = (indexes[0], [leaf for _, leaf in own])
    return growing


def _store(curs: Cursor[Any], schema: str, written: dict[tuple[Tree, TileKey], bytes]) -> None:
    """One statement for each table. A tile only grows: one written again (a batch applied
    again after its tracking record was reset) never shrinks it."""
    for tenanted in (False, True):
        rows = [(tree, key, tile) for (tree, key), tile in written.items() if (tree is not None) is tenanted]
        if not rows:
            continue
        levels = [level for _, (level, _), _ in rows]
        indexes = [index for _, (_, index), _ in rows]
        tiles = [tile for _, _, tile in rows]
        if tenanted:
            query = (
                "INSERT INTO {s}.merkle_tenant_tiles AS t (tenant, level, idx, hashes)"
                " SELECT * FROM unnest(%s::text[], %s::smallint[], %s::bigint[], %b::bytea[])"
                " ON CONFLICT (tenant, level, idx) DO UPDATE SET hashes = EXCLUDED.hashes"
                " WHERE length(EXCLUDED.hashes) > length(t.hashes)"
            )
            params: Sequence[Any] = ([tree for tree, _, _ in rows], levels, indexes, tiles)
        else:
            query = (
                "INSERT INTO {s}.merkle_tiles AS t (level, idx, hashes)"
                " SELECT * FROM unnest(%s::smallint[], %s::bigint[], %b::bytea[])"
                " ON CONFLICT (level, idx) DO UPDATE SET hashes = EXCLUDED.hashes"
                " WHERE length(EXCLUDED.hashes) > length(t.hashes)"
            )
            params = (levels, indexes, tiles)
        curs.execute(SQL(query).format(s=Identifier(schema)), params)


def load_tiles(
    curs: Cursor[Any], schema: str, keys: set[tuple[Tree, TileKey]]
) -> dict[tuple[Tree, TileKey], bytes]:
    """The stored tiles of ``keys`` (one query for each table they name); a missing one is
    simply absent."""
    found: dict[tuple[Tree, TileKey], bytes] = {}
    ledger = sorted(key for tree, key in keys if tree is None)
    if ledger:
        curs.execute(
            SQL(
                "SELECT t.level, t.idx, t.hashes FROM {s}.merkle_tiles t"
                " JOIN unnest(%s::smallint[], %s::bigint[]) AS k(level, idx) ON t.level = k.level AND t.idx = k.idx"
            ).format(s=Identifier(schema)),
            ([level for level, _ in ledger], [index for _, index in ledger]),
        )
        found.update(((None, (int(r["level"]), int(r["idx"]))), bytes(r["hashes"])) for r in curs.fetchall())
    tenants = sorted((tree, key) for tree, key in keys if tree is not None)
    if tenants:
        curs.execute(
            SQL(
                "SELECT t.tenant, t.level, t.idx, t.hashes FROM {s}.merkle_tenant_tiles t"
                " JOIN unnest(%s::text[], %s::smallint[], %s::bigint[]) AS k(tenant, level, idx)"
                " ON t.tenant = k.tenant AND t.level = k.level AND t.idx = k.idx"
            ).format(s=Identifier(schema)),
            ([t for t, _ in tenants], [key[0] for _, key in tenants], [key[1] for _, key in tenants]),
        )
        found.update(
            ((str(r["tenant"]), (int(r["level"]), int(r["idx"]))), bytes(r["hashes"]))
            for r in curs.fetchall()
        )
    return found


def tenant_size(curs: Cursor[Any], schema: str, tenant: str) -> int:
    """How many of ``tenant``'s events its tree holds (its last leaf tile, by the primary key)."""
    curs.execute(
        SQL(
            "SELECT idx, hashes FROM {s}.merkle_tenant_tiles WHERE tenant = %s AND level = 0"
            " ORDER BY idx DESC LIMIT 1"
        ).format(s=Identifier(schema)),
        (tenant,),
    )
    row = curs.fetchone()
    return 0 if row is None else size_of((0, int(row["idx"])), bytes(row["hashes"]))
