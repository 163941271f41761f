"""The ``merkle`` read model: the tree's complete subtrees (domain/model/merkle.py). Each
batch reads the raw records of its positions (the chain's canonical form, ciphertext: an
erased memory's leaf stays and still proves its place), hashes them as leaves, and writes the
nodes they complete; the left siblings it needs are the stored frontier of the size before."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.chain import canonical
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.merkle import NodeKey, appended, frontier, leaf_hash
from memwarden.domain.settings import SCHEMA

NODE_COLUMNS = "level, idx, hash"


class MerkleProjection:
    name = "merkle"
    tables = ("merkle_nodes",)

    def __init__(self, ledger_schema: str = SCHEMA) -> None:
        self.ledger_schema = ledger_schema

    def create(self, curs: Cursor[Any], schema: str) -> None:
        curs.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {s}.merkle_nodes (level smallint NOT NULL, idx bigint NOT NULL,"
                " hash bytea NOT NULL, PRIMARY KEY (level, idx))"
            ).format(s=Identifier(schema))
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        first, last = int(events[0].position or 0), int(events[-1].position or 0)
        records = self._records(curs, first, last)
        if [position for position, _ in records] != list(range(first, last + 1)):
            raise LookupError(f"the ledger's positions {first}..{last} are not all there to hash")
        nodes = load_nodes(curs, schema, set(frontier(first - 1)))
        levels: list[int] = []
        indexes: list[int] = []
        hashes: list[bytes] = []
        for position, record in records:
            for (level, index), digest in appended(position - 1, leaf_hash(record), nodes.__getitem__):
                nodes[(level, index)] = digest
                levels.append(level)
                indexes.append(index)
                hashes.append(digest)
        curs.execute(  # one statement a batch: the nodes as three arrays
            SQL(
                "INSERT INTO {s}.merkle_nodes (" + NODE_COLUMNS + ")"
                " SELECT * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[])"
            ).format(s=Identifier(schema)),
            (levels, indexes, hashes),
        )

    def _records(self, curs: Cursor[Any], first: int, last: int) -> list[tuple[int, bytes]]:
        curs.execute(
            SQL(
                "SELECT notification_id, originator_id, originator_version, topic, state FROM {s}.events"
                " WHERE notification_id BETWEEN %s AND %s ORDER BY notification_id"
            ).format(s=Identifier(self.ledger_schema)),
            (first, last),
        )
        return [
            (
                int(row["notification_id"]),
                canonical(
                    int(row["notification_id"]),
                    UUID(str(row["originator_id"])),
                    int(row["originator_version"]),
                    str(row["topic"]),
                    bytes(row["state"]),
                ),
            )
            for row in curs.fetchall()
        ]


def load_nodes(curs: Cursor[Any], schema: str, keys: set[NodeKey]) -> dict[NodeKey, bytes]:
    """The stored nodes of ``keys`` (one query); a missing one is simply absent."""
    if not keys:
        return {}
    levels, indexes = zip(*sorted(keys), strict=True)
    curs.execute(
        SQL(
            "SELECT n.level, n.idx, n.hash FROM {s}.merkle_nodes n"
            " JOIN unnest(%s::smallint[], %s::bigint[]) AS k(level, idx) ON n.level = k.level AND n.idx = k.idx"
        ).format(s=Identifier(schema)),
        (list(levels), list(indexes)),
    )
    return {(int(row["level"]), int(row["idx"])): bytes(row["hash"]) for row in curs.fetchall()}
