"""The chained application recorder.

Every append goes through one PL/pgSQL function that, under the events table's
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
from psycopg.sql import SQL, Composed, Identifier, Literal

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


def ledger_sql(schema: str, channel: str) -> list[Composed]:
    """Tables and the append function that live beside the library's events table."""
    s = Identifier(schema)
    return [
        SQL(
            "CREATE TABLE IF NOT EXISTS {s}.ledger_chain ( position bigint PRIMARY KEY, hash bytea NOT NULL)"
        ).format(s=s),
        SQL(
            "CREATE TABLE IF NOT EXISTS {s}.data_keys ("
            " memory_id uuid PRIMARY KEY, kek_id text NOT NULL, wrapped bytea NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        ).format(s=s),
        SQL(
            "CREATE TABLE IF NOT EXISTS {s}.signing_keys ("
            " key_id text PRIMARY KEY, public_key bytea NOT NULL,"
            " created_at timestamptz NOT NULL DEFAULT now())"
        ).format(s=s),
        SQL(
            "CREATE TABLE IF NOT EXISTS {s}.checkpoints ("
            " id bigserial PRIMARY KEY, position bigint NOT NULL, hash text NOT NULL,"
            " time timestamptz NOT NULL, key_id text NOT NULL, signature text NOT NULL)"
        ).format(s=s),
        SQL(
            "CREATE TABLE IF NOT EXISTS {s}.secrets ("
            " name text PRIMARY KEY, kek_id text NOT NULL, wrapped bytea NOT NULL)"
        ).format(s=s),
        SQL(
            "DROP FUNCTION IF EXISTS {s}.mw_append(uuid[], bigint[], text[], bytea[], int[], uuid[], int[],"
            " text[], bytea[])"
        ).format(s=s),
        SQL(
            """
CREATE OR REPLACE FUNCTION {s}.mw_append(
    p_ids uuid[], p_versions bigint[], p_topics text[], p_states bytea[], p_groups int[],
    p_key_ids uuid[], p_key_groups int[], p_key_keks text[], p_key_wrapped bytea[],
    p_destroy_ids uuid[], p_destroy_groups int[])
RETURNS TABLE(grp int, pos bigint)
LANGUAGE plpgsql AS $body$
DECLARE
    bad int[] := '{{}}';
    head_pos bigint;
    head_hash bytea;
    at_pos bigint;
    h bytea;
    topic_bytes bytea;
    hashes bytea[];
    appended int[];
    r record;
    i int;
    attempt int;
BEGIN
    LOCK TABLE {s}.{events} IN EXCLUSIVE MODE;
    PERFORM pg_notify({channel}, '');
    SELECT c.position, c.hash INTO head_pos, head_hash
      FROM {s}.ledger_chain c ORDER BY c.position DESC LIMIT 1;
    IF head_pos IS NULL THEN
        head_pos := 0;
        head_hash := '\\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    END IF;
    -- Arrays are walked with unnest, never subscripted in a loop: subscripting an array
    -- of variable-length values costs O(n) per access.
    FOR attempt IN 1 .. 2 LOOP
        hashes := '{{}}';
        appended := '{{}}';
        at_pos := head_pos;
        h := head_hash;
        FOR r IN
            SELECT u.id, u.ver, u.topic, u.state, u.g
              FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
                   WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
             WHERE NOT (u.g = ANY(bad))
             ORDER BY u.ord
        LOOP
            at_pos := at_pos + 1;
            topic_bytes := convert_to(r.topic, 'UTF8');
            h := sha256(h || int8send(at_pos) || uuid_send(r.id) || int8send(r.ver)
                        || int4send(octet_length(topic_bytes)) || topic_bytes
                        || int4send(octet_length(r.state)) || r.state);
            hashes := array_append(hashes, h);
            appended := array_append(appended, r.g);
        END LOOP;
        BEGIN
            -- Optimistic concurrency: a stream version already taken violates the primary
            -- key. Rare, so the common path does no lookups; the rare one finds the groups.
            INSERT INTO {s}.{events} (notification_id, originator_id, originator_version, topic, state)
            SELECT head_pos + row_number() OVER (ORDER BY u.ord), u.id, u.ver, u.topic, u.state
              FROM unnest(p_ids, p_versions, p_topics, p_states, p_groups)
                   WITH ORDINALITY AS u(id, ver, topic, state, g, ord)
             WHERE NOT (u.g = ANY(bad));
            INSERT INTO {s}.ledger_chain (position, hash)
            SELECT head_pos + x.o, x.hh FROM unnest(hashes) WITH ORDINALITY AS x(hh, o);
            IF cardinality(p_key_ids) > 0 THEN
                INSERT INTO {s}.data_keys (memory_id, kek_id, wrapped)
                SELECT k.id, k.kek, k.wrapped
                  FROM unnest(p_key_ids, p_key_groups, p_key_keks, p_key_wrapped) AS k(id, g, kek, wrapped)
                 WHERE NOT (k.g = ANY(bad))
                ON CONFLICT (memory_id) DO NOTHING;
            END IF;
            IF cardinality(p_destroy_ids) > 0 THEN
                -- Crypto-shredding: the erased memories' keys go in the same transaction
                -- as their MemoryErased events, or not at all.
                DELETE FROM {s}.data_keys d
                 USING unnest(p_destroy_ids, p_destroy_groups) AS k(id, g)
                 WHERE d.memory_id = k.id AND NOT (k.g = ANY(bad));
            END IF;
            EXIT;
        EXCEPTION WHEN unique_violation THEN
            IF attempt = 2 THEN
                RAISE;
            END IF;
            SELECT coalesce(array_agg(DISTINCT u.g), '{{}}') INTO bad
              FROM unnest(p_ids, p_versions, p_groups) AS u(id, ver, g)
             WHERE EXISTS (SELECT 1 FROM {s}.{events} e
                            WHERE e.originator_id = u.id AND e.originator_version = u.ver);
        END;
    END LOOP;
    FOR i IN 1 .. cardinality(appended) LOOP
        grp := appended[i];
        pos := head_pos + i;
        RETURN NEXT;
    END LOOP;
    FOREACH grp IN ARRAY bad LOOP
        pos := NULL;
        RETURN NEXT;
    END LOOP;
END
$body$
"""
        ).format(s=s, events=Identifier(EVENTS_TABLE), channel=Literal(channel)),
    ]


class ChainedApplicationRecorder(PostgresApplicationRecorder):
    """The library's Postgres recorder, with every insert routed through ``mw_append``."""

    def __init__(self, datastore: PostgresDatastore, **_: Any) -> None:
        super().__init__(datastore, events_table_name=EVENTS_TABLE)
        self.schema = datastore.schema
        self.sql_create_statements.extend(ledger_sql(self.schema, self.channel_name))
        self._append_sql = SQL(
            "SELECT grp, pos FROM {s}.mw_append(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[],"
            " %s::int[], %s::uuid[], %s::int[], %s::text[], %s::bytea[], %s::uuid[], %s::int[])"
        ).format(s=Identifier(self.schema))

    def create_table(self) -> None:
        """Create everything in one transaction under an advisory lock (many processes)."""
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(hashtext('memwarden schema'))")
            curs.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(self.schema)))
            curs.execute(
                "SELECT 1 FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace"
                " WHERE n.nspname = %s AND t.typname = %s",
                (self.schema, self.stored_event_type_name),
            )
            exists = curs.fetchone() is not None
            for statement in self.sql_create_statements:
                if exists and "CREATE TYPE" in statement.as_string():
                    continue
                curs.execute(statement, prepare=False)
        self.datastore.register_type_adapters()

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
