"""The chained application recorder.

Every append goes through one PL/pgSQL function (``mw_append``, made by migration
0001_ledger.sql in bootstrap/migrations) that, under the events table's
EXCLUSIVE lock: finds the groups whose stream versions are already taken (optimistic
concurrency, reported per group instead of failing the whole call), gives the other
groups' events the next gapless positions, writes each event's chain link, stores
the wrapped data keys of new memories and deletes the data keys of erased ones. One round trip, one transaction, so a group
commit of many writers costs one lock, one fsync and one call.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor, ServerCursor
from psycopg.sql import SQL, Identifier

from domain.ledger.chain import ChainReport, verify_rows

EVENTS_TABLE = "events"


class DataKeyRow(msgspec.Struct, frozen=True):
    memory_id: UUID
    kek_id: str
    wrapped: bytes


class AppendGroup(msgspec.Struct, frozen=True):
    """The events of one syscall: all of them are appended, or none."""

    events: Sequence[StoredEvent]
    data_keys: Sequence[DataKeyRow] = ()
    destroy_keys: Sequence[UUID] = ()
    """Data keys to delete (erasure) in the same transaction, if the group is appended."""


class GroupResult(msgspec.Struct, frozen=True):
    positions: tuple[int, ...] = ()
    conflict: bool = False


class ChainedApplicationRecorder(PostgresApplicationRecorder):
    """The library's Postgres recorder, with every insert routed through ``mw_append``.

    Its tables and the append function are made by migrations (bootstrap/migrations/0001),
    not by the recorder: the library's table creation is off (``CREATE_TABLE=no``)."""

    def __init__(self, datastore: PostgresDatastore, **_: Any) -> None:
        super().__init__(datastore, events_table_name=EVENTS_TABLE)
        self.schema = datastore.schema
        self._append_sql = SQL(
            "SELECT grp, pos FROM {s}.mw_append(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[],"
            " %s::int[], %s::uuid[], %s::int[], %s::text[], %s::bytea[], %s::uuid[], %s::int[])"
        ).format(s=Identifier(self.schema))

    def insert_events(self, stored_events: Sequence[StoredEvent], **_: Any) -> Sequence[int] | None:
        result = self.append_groups([AppendGroup(events=stored_events)])[0]
        if result.conflict:
            raise IntegrityError("a stream version in this append is already taken")
        return list(result.positions)

    def append_groups(self, groups: Sequence[AppendGroup]) -> list[GroupResult]:
        """Append several independent groups in one transaction; conflicts are per group."""
        doomed = _groups_colliding_in_batch(groups)
        live = [(i, g) for i, g in enumerate(groups) if i not in doomed]
        events = [(i, e) for i, g in live for e in g.events]
        keys = [(i, k) for i, g in live for k in g.data_keys]
        destroy = [(i, d) for i, g in live for d in g.destroy_keys]
        params = (
            _array(str(e.originator_id) for _, e in events),
            _array(str(e.originator_version) for _, e in events),
            _array(_quoted(e.topic) for _, e in events),
            _array(_bytea(e.state) for _, e in events),
            _array(str(i) for i, _ in events),
            _array(str(k.memory_id) for _, k in keys),
            _array(str(i) for i, _ in keys),
            _array(_quoted(k.kek_id) for _, k in keys),
            _array(_bytea(k.wrapped) for _, k in keys),
            _array(str(d) for _, d in destroy),
            _array(str(i) for i, _ in destroy),
        )
        positions: dict[int, list[int]] = {i: [] for i in range(len(groups))}
        conflicts = set(doomed)
        if events:
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                curs.execute(self._append_sql, params, prepare=True)
                for row in curs.fetchall():
                    if row["pos"] is None:
                        conflicts.add(row["grp"])
                    else:
                        positions[row["grp"]].append(row["pos"])
        return [
            GroupResult(positions=tuple(positions[i]), conflict=i in conflicts) for i in range(len(groups))
        ]

    def head(self) -> tuple[int, bytes]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(
                SQL("SELECT position, hash FROM {}.ledger_chain ORDER BY position DESC LIMIT 1").format(
                    Identifier(self.schema)
                )
            )
            row = curs.fetchone()
        if row is None:
            return 0, bytes(32)
        return int(row["position"]), bytes(row["hash"])

    def verify_chain(
        self,
        stop_at: int | None = None,
        cursor: Cursor[Any] | None = None,
        anchor: tuple[int, str] | None = None,
    ) -> ChainReport:
        """Recompute the chain from the first event; name the first bad position."""
        if cursor is not None:
            return verify_tables(cursor, self.schema, stop_at, anchor)
        with self.datastore.get_connection() as conn, conn.transaction():
            return verify_tables(conn.cursor(name="mw_verify"), self.schema, stop_at, anchor)


def verify_tables(
    cursor: Cursor[Any], schema: str, stop_at: int | None = None, anchor: tuple[int, str] | None = None
) -> ChainReport:
    """Verify the events and chain tables of ``schema`` (any copy of them, too)."""
    query = SQL(
        "SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state,"
        " c.position, c.hash FROM {s}.{events} e"
        " FULL OUTER JOIN {s}.ledger_chain c ON c.position = e.notification_id"
        " ORDER BY coalesce(e.notification_id, c.position)"
    ).format(s=Identifier(schema), events=Identifier(EVENTS_TABLE))
    if isinstance(cursor, ServerCursor):
        cursor.itersize = 5000
    cursor.execute(query)
    return verify_rows(_as_tuples(cursor), stop_at, anchor)


def _array(items: Iterable[str]) -> str:
    """A PostgreSQL array literal: formatting it here is several times cheaper than
    letting the driver adapt nine Python lists on every append."""
    return "{" + ",".join(items) + "}"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _bytea(data: bytes) -> str:
    return '"\\\\x' + data.hex() + '"'


def _as_tuples(rows: Any) -> Any:
    for row in rows:
        yield tuple(row.values()) if isinstance(row, dict) else row


def _groups_colliding_in_batch(groups: Sequence[AppendGroup]) -> set[int]:
    """Two groups of one batch that write the same stream version: the later one loses."""
    seen: set[tuple[Any, int]] = set()
    doomed: set[int] = set()
    for index, group in enumerate(groups):
        keys = {(e.originator_id, e.originator_version) for e in group.events}
        if keys & seen:
            doomed.add(index)
        else:
            seen |= keys
    return doomed
