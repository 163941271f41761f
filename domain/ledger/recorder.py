"""The chained application recorder.

Every append goes through one PL/pgSQL routine (bootstrap/migrations: ``mw_append`` of
0001, as 0005 and 0008 redefine it; the recorder calls the procedure
``mw_append_announced``) that, under the ledger's sequence lock: finds the groups whose
stream versions are already taken (optimistic concurrency, reported per group instead of
failing the whole call), gives the other groups' events the next gapless positions,
writes each event's chain link, stores the wrapped data keys of new memories and deletes
the data keys of erased ones. One round trip, one durable transaction, so a group commit
of many writers costs one lock, one fsync and one call; the announcement to the
projections (``pg_notify``) follows in a transaction of its own that does not wait for a
flush, since a NOTIFY's commit takes a lock shared by the whole server (0008).

With a chain per tenant (``MEMWARDEN_LEDGER_CHAINS=tenant``, deploy/SCALE.md §3) the
groups are split by tenant and each tenant's go, in one round trip, through the procedure
``mw_append_tenant_sequenced``: ``mw_append_tenant`` locks only that tenant's head row and
commits the events durably with their global positions NULL ("pending"); then
``mw_sequence_for``, a second and short transaction, gives every pending row its global
position and global link under the sequence lock (or finds that a concurrent sequencer
already did), committed without waiting for a flush so the lock is not held through one;
a third flushes the WAL up to there, outside the lock, before the positions are returned.
Appends of two tenants never wait on each other's lock through a flush; only the
sequencing, a few row updates, is global.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any
from uuid import UUID

import msgspec
from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import Cursor, ServerCursor
from psycopg.sql import SQL, Composed, Identifier

from memwarden.domain.ledger.chain import (
    ChainReport,
    TenantChainReport,
    chain_head,
    verify_rows,
    verify_tenant_rows,
)

EVENTS_TABLE = "events"
LIBRARY_TENANT = "/library"
"""The tenant of the library's own ``insert_events``: no namespace's first segment holds '/'."""


class DataKeyRow(msgspec.Struct, frozen=True):
    memory_id: UUID
    kek_id: str
    wrapped: bytes


class AppendGroup(msgspec.Struct, frozen=True):
    """The events of one syscall: all of them are appended, or none."""

    events: Sequence[StoredEvent]
    tenant: str
    """Whose chain the events go on with a chain per tenant (the syscall's tenant)."""
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
        self.tenant_chains = False
        """A chain per tenant (set by the ledger from ``MEMWARDEN_LEDGER_CHAINS``)."""
        arrays = (
            "%s::uuid[], %s::bigint[], %s::text[], %s::bytea[], %s::int[],"
            " %s::uuid[], %s::int[], %s::text[], %s::bytea[], %s::uuid[], %s::int[]"
        )
        s = Identifier(self.schema)
        self._append_sql = SQL("CALL {s}.mw_append_announced(" + arrays + ", NULL, NULL)").format(s=s)
        self._append_tenant_sql = SQL("SELECT grp, pos FROM {s}.mw_append_tenant(%s, " + arrays + ")").format(
            s=s
        )
        self._append_sequenced_sql = SQL(
            "CALL {s}.mw_append_tenant_sequenced(%s, " + arrays + ", NULL)"
        ).format(s=s)
        self._sequence_sql = SQL(
            "SELECT originator_id, originator_version, notification_id FROM {s}.mw_sequence()"
        ).format(s=s)
        self._pending_sql = SQL(
            "SELECT tenant, done + 1 AS tenant_position FROM {s}.tenant_pending ORDER BY tenant LIMIT 1"
        ).format(s=s)

    def insert_events(self, stored_events: Sequence[StoredEvent], **_: Any) -> Sequence[int] | None:
        result = self.append_groups([AppendGroup(events=stored_events, tenant=LIBRARY_TENANT)])[0]
        if result.conflict:
            raise IntegrityError("a stream version in this append is already taken")
        return list(result.positions)

    def append_groups(self, groups: Sequence[AppendGroup]) -> list[GroupResult]:
        """Append several independent groups; conflicts are per group. On the single chain:
        one transaction. With a chain per tenant: one per tenant, then one to sequence."""
        if self.tenant_chains:
            return self._append_per_tenant(groups)
        doomed = _groups_colliding_in_batch(groups)
        positions: dict[int, list[int]] = {i: [] for i in range(len(groups))}
        conflicts = set(doomed)
        live = [(i, g) for i, g in enumerate(groups) if i not in doomed]
        rows = self._call(self._append_sql, (), live)
        found = zip(rows[0]["r_groups"] or (), rows[0]["r_positions"] or (), strict=True) if rows else ()
        for group, position in found:
            if position is None:
                conflicts.add(group)
            else:
                positions[group].append(position)
        return [
            GroupResult(positions=tuple(positions[i]), conflict=i in conflicts) for i in range(len(groups))
        ]

    def append_tenant_groups(self, groups: Sequence[AppendGroup]) -> set[int]:
        """Only the first transaction of a tenant-chain append: each tenant's groups on its own
        chain, committed pending (no global position yet; ``sequence`` gives them theirs).
        Returns the refused groups. What a process that died in between leaves behind."""
        conflicts = _groups_colliding_in_batch(groups)
        live = sorted(((i, g) for i, g in enumerate(groups) if i not in conflicts), key=lambda x: x[1].tenant)
        for tenant, of_tenant in groupby(live, key=lambda x: x[1].tenant):
            rows = self._call(self._append_tenant_sql, (tenant,), list(of_tenant))
            conflicts.update(row["grp"] for row in rows if row["pos"] is None)
        return conflicts

    def _append_per_tenant(self, groups: Sequence[AppendGroup]) -> list[GroupResult]:
        """Each tenant's groups in one round trip (``mw_append_tenant_sequenced``): appended on
        the tenant's chain and committed, then given their global positions."""
        conflicts = _groups_colliding_in_batch(groups)
        positions: dict[int, list[int]] = {i: [] for i in range(len(groups))}
        live = sorted(((i, g) for i, g in enumerate(groups) if i not in conflicts), key=lambda x: x[1].tenant)
        for tenant, grouped in groupby(live, key=lambda x: x[1].tenant):
            of_tenant = list(grouped)
            rows = self._call(self._append_sequenced_sql, (tenant,), of_tenant)
            found = rows[0]["r_positions"] if rows else []
            events = [i for i, g in of_tenant for _ in g.events]
            for i, position in zip(events, found, strict=True):
                if position is None:
                    conflicts.add(i)
                else:
                    positions[i].append(position)
        return [
            GroupResult(conflict=True) if i in conflicts else GroupResult(positions=tuple(positions[i]))
            for i in range(len(groups))
        ]

    def sequence(self) -> int:
        """Give every committed pending event its global position (``mw_sequence``); how many."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._sequence_sql, prepare=True)
            return len(curs.fetchall())

    def oldest_pending(self) -> tuple[str, int] | None:
        """The first event still waiting for a global position: (tenant, tenant position).
        One row per tenant answers (``tenant_pending``: heads against how far each tenant
        is sequenced), whatever the history."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self._pending_sql, prepare=True)
            row = curs.fetchone()
        return None if row is None else (str(row["tenant"]), int(row["tenant_position"]))

    def _call(
        self, sql: Composed, prefix: tuple[Any, ...], live: Sequence[tuple[int, AppendGroup]]
    ) -> list[Any]:
        """One append function call (its own transaction) with the groups' arrays."""
        events = [(i, e) for i, g in live for e in g.events]
        if not events:
            return []
        keys = [(i, k) for i, g in live for k in g.data_keys]
        destroy = [(i, d) for i, g in live for d in g.destroy_keys]
        params = (
            *prefix,
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
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(sql, params, prepare=True)
            return curs.fetchall()

    def head(self) -> tuple[int, bytes]:
        with self.datastore.get_connection() as conn:
            return chain_head(conn, self.schema)

    def verify_chain(
        self,
        stop_at: int | None = None,
        cursor: Cursor[Any] | None = None,
        anchor: tuple[int, str] | None = None,
    ) -> ChainReport:
        """Recompute the chain from the first event; name the first bad position. Then every
        tenant chain, if there are any (naming the tenant and tenant position of a bad link)."""
        if cursor is not None:
            report = verify_tables(cursor, self.schema, stop_at, anchor)
            return with_tenants(report, verify_tenant_tables(cursor, self.schema))
        with self.datastore.get_connection() as conn, conn.transaction():
            # one snapshot for both passes: the tenants' heads, chains and events agree
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            report = verify_tables(conn.cursor(name="mw_verify"), self.schema, stop_at, anchor)
            tenants = verify_tenant_tables(conn.cursor(name="mw_verify_tenants"), self.schema)
        return with_tenants(report, tenants)


def verify_tables(
    cursor: Cursor[Any], schema: str, stop_at: int | None = None, anchor: tuple[int, str] | None = None
) -> ChainReport:
    """Verify the events and chain tables of ``schema`` (any copy of them, too). Events not
    sequenced yet (tenant chains) have no global link to check: their tenant chain does."""
    query = SQL(
        "SELECT e.notification_id, e.originator_id, e.originator_version, e.topic, e.state,"
        " c.position, c.hash FROM (SELECT * FROM {s}.{events} WHERE notification_id IS NOT NULL) e"
        " FULL OUTER JOIN {s}.ledger_chain c ON c.position = e.notification_id"
        " ORDER BY coalesce(e.notification_id, c.position)"
    ).format(s=Identifier(schema), events=Identifier(EVENTS_TABLE))
    if isinstance(cursor, ServerCursor):
        cursor.itersize = 5000
    cursor.execute(query)
    return verify_rows(_as_tuples(cursor), stop_at, anchor)


def verify_tenant_tables(cursor: Cursor[Any], schema: str) -> TenantChainReport:
    """Verify every tenant chain of ``schema`` against its events and its head row."""
    s = Identifier(schema)
    heads = {
        str(row[0]): (int(row[1]), bytes(row[2]))
        for row in _as_tuples(
            cursor.connection.execute(SQL("SELECT tenant, position, hash FROM {s}.tenant_heads").format(s=s))
        )
    }
    query = SQL(
        "SELECT coalesce(e.tenant, c.tenant), e.tenant_position, e.originator_id, e.originator_version,"
        " e.topic, e.state, c.position, c.hash"
        " FROM (SELECT * FROM {s}.{events} WHERE tenant IS NOT NULL) e"
        " FULL OUTER JOIN {s}.tenant_chain c ON c.tenant = e.tenant AND c.position = e.tenant_position"
        " ORDER BY coalesce(e.tenant, c.tenant), coalesce(e.tenant_position, c.position)"
    ).format(s=s, events=Identifier(EVENTS_TABLE))
    if isinstance(cursor, ServerCursor):
        cursor.itersize = 5000
    cursor.execute(query)
    return verify_tenant_rows(_as_tuples(cursor), heads)


def with_tenants(report: ChainReport, tenants: TenantChainReport) -> ChainReport:
    """The single chain's report, with the tenant chains' verdict added to it."""
    problem = report.problem
    if problem is None and not tenants.ok:
        problem = f"tenant {tenants.first_bad_tenant!r} chain, tenant position {tenants.first_bad_position}: {tenants.problem}"
    return msgspec.structs.replace(
        report,
        ok=report.ok and tenants.ok,
        problem=problem,
        tenant_chains=tenants.tenants,
        tenant_events=tenants.checked,
        first_bad_tenant=tenants.first_bad_tenant,
        first_bad_tenant_position=tenants.first_bad_position,
    )


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
