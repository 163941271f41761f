"""The ``merkle`` read model: the tree's complete subtrees (domain/model/merkle.py). Each
batch reads the raw records of its positions (the chain's canonical form, ciphertext: an
erased memory's leaf stays and still proves its place), hashes them as leaves, and writes the
nodes they complete; the left siblings it needs are the stored frontier of the size before."""

from __future__ import annotations

from typing import Any, NamedTuple

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.merkle import NodeKey, appended, frontier, leaf_hash
from memwarden.domain.settings import SCHEMA
from memwarden.projections.merkle.records import RECORD_COLUMNS, record_of


class MerkleProjection:
    name = "merkle"
    tables = ("merkle_nodes", "merkle_tenant_nodes")

    def __init__(self, ledger_schema: str = SCHEMA) -> None:
        self.ledger_schema = ledger_schema

    def create(self, curs: Cursor[Any], schema: str) -> None:
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {s}.merkle_nodes (level smallint NOT NULL, idx bigint NOT NULL,"
                " hash bytea NOT NULL, PRIMARY KEY (level, idx))"
            ).format(s=Identifier(schema))
        )
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {s}.merkle_tenant_nodes (tenant text NOT NULL, level smallint NOT NULL,"
                " idx bigint NOT NULL, hash bytea NOT NULL, PRIMARY KEY (tenant, level, idx))"
            ).format(s=Identifier(schema))
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        first, last = int(events[0].position or 0), int(events[-1].position or 0)
        records = self._records(curs, first, last)
        if [r.position for r in records] != list(range(first, last + 1)):
            raise LookupError(f"the ledger's positions {first}..{last} are not all there to hash")
        leaves = [(r.position - 1, leaf_hash(r.record)) for r in records]
        _insert(curs, schema, None, _grown(load_nodes(curs, schema, set(frontier(first - 1))), leaves))
        for tenant, own in _by_tenant(records).items():
            start = own[0][0]
            nodes = load_nodes(curs, schema, set(frontier(start)), tenant)
            _insert(curs, schema, tenant, _grown(nodes, own))

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


def _by_tenant(records: list[LedgerRecord]) -> dict[str, list[tuple[int, bytes]]]:
    """Each tenant's (leaf index, leaf hash) in the batch, in tenant order."""
    found: dict[str, list[tuple[int, bytes]]] = {}
    for r in records:
        if r.tenant is not None and r.tenant_position is not None:
            found.setdefault(r.tenant, []).append((r.tenant_position - 1, leaf_hash(r.record)))
    for tenant, leaves in found.items():
        leaves.sort()
        indexes = [index for index, _ in leaves]
        if indexes != list(range(indexes[0], indexes[0] + len(indexes))):
            raise LookupError(f"tenant {tenant!r}: its positions in this batch are not consecutive")
    return found


def _grown(nodes: dict[NodeKey, bytes], leaves: list[tuple[int, bytes]]) -> list[tuple[NodeKey, bytes]]:
    """The nodes ``leaves`` (index, hash, in order) complete, given the frontier before them."""
    written: list[tuple[NodeKey, bytes]] = []
    for index, leaf in leaves:
        for key, digest in appended(index, leaf, nodes.__getitem__):
            nodes[key] = digest
            written.append((key, digest))
    return written


def _insert(curs: Cursor[Any], schema: str, tenant: str | None, written: list[tuple[NodeKey, bytes]]) -> None:
    """One statement for the batch's nodes of one tree: the nodes as arrays. A node is written
    once and never changes: one applied again (tracking reset) is the same node, left as it is."""
    levels = [level for (level, _), _ in written]
    indexes = [index for (_, index), _ in written]
    hashes = [digest for _, digest in written]
    if tenant is None:
        query = (
            "INSERT INTO {s}.merkle_nodes (level, idx, hash)"
            " SELECT * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[]) ON CONFLICT DO NOTHING"
        )
        curs.execute(SQL(query).format(s=Identifier(schema)), (levels, indexes, hashes))
        return
    query = (
        "INSERT INTO {s}.merkle_tenant_nodes (tenant, level, idx, hash)"
        " SELECT %s, * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[]) ON CONFLICT DO NOTHING"
    )
    curs.execute(SQL(query).format(s=Identifier(schema)), (tenant, levels, indexes, hashes))


def load_nodes(
    curs: Cursor[Any], schema: str, keys: set[NodeKey], tenant: str | None = None
) -> dict[NodeKey, bytes]:
    """The stored nodes of ``keys`` (one query) of the ledger's tree, or of ``tenant``'s; a
    missing one is simply absent."""
    if not keys:
        return {}
    levels, indexes = zip(*sorted(keys), strict=True)
    table, where = ("merkle_nodes", "") if tenant is None else ("merkle_tenant_nodes", " WHERE n.tenant = %s")
    curs.execute(
        SQL(
            "SELECT n.level, n.idx, n.hash FROM {s}.{t} n"
            " JOIN unnest(%s::smallint[], %s::bigint[]) AS k(level, idx) ON n.level = k.level AND n.idx = k.idx"
            + where
        ).format(s=Identifier(schema), t=Identifier(table)),
        (list(levels), list(indexes), *(() if tenant is None else (tenant,))),
    )
    return {(int(row["level"]), int(row["idx"])): bytes(row["hash"]) for row in curs.fetchall()}


def tenant_size(curs: Cursor[Any], schema: str, tenant: str) -> int:
    """How many of ``tenant``'s events its tree holds (its last leaf, by the primary key)."""
    curs.execute(
        SQL(
            "SELECT idx FROM {s}.merkle_tenant_nodes WHERE tenant = %s AND level = 0 ORDER BY idx DESC LIMIT 1"
        ).format(s=Identifier(schema)),
        (tenant,),
    )
    row = curs.fetchone()
    return 0 if row is None else int(row["idx"]) + 1
