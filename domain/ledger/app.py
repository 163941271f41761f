"""The ledger: an eventsourcing application on PostgreSQL, chained, sealed, group-committed."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, cast
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.postgres import PostgresDatastore, PostgresFactory
from psycopg.sql import SQL, Identifier

from domain.ledger.chain import ChainReport
from domain.ledger.checkpoints import Checkpoint, CheckpointSigner, verify_checkpoint_signature
from domain.ledger.database import ConnectionParams
from domain.ledger.group_commit import GroupCommitter
from domain.ledger.keys import KeyEncryptionKey, SigningKey
from domain.ledger.mapper import Recorded, SealingMapper
from domain.ledger.recorder import (
    EVENTS_TABLE,
    AppendGroup,
    ChainedApplicationRecorder,
    DataKeyRow,
    GroupResult,
)
from domain.ledger.sealing import DataKeys, unwrap_key, wrap_key
from domain.model.events import EVENT_TYPES
from domain.settings import SCHEMA


class StreamConflict(Exception):
    """Another writer took a stream version this append expected to take. Re-decide."""


class NewMemoryKey:
    """A data key created for a memory written by this append."""

    __slots__ = ("memory_id", "wrapped")

    def __init__(self, memory_id: UUID, wrapped: bytes) -> None:
        self.memory_id = memory_id
        self.wrapped = wrapped


def ledger_env(params: ConnectionParams, pool_size: int = 8) -> dict[str, str]:
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": "domain.ledger.recorder:ChainedApplicationRecorder",
        "POSTGRES_DBNAME": params.dbname,
        "POSTGRES_HOST": params.host,
        "POSTGRES_PORT": params.port,
        "POSTGRES_USER": params.user,
        "POSTGRES_PASSWORD": params.password,
        "POSTGRES_SCHEMA": SCHEMA,
        "POSTGRES_POOL_SIZE": str(pool_size),
        "POSTGRES_MAX_OVERFLOW": str(pool_size * 2),
        "POSTGRES_CONNECT_TIMEOUT": "10",
        "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "30",
        "CREATE_TABLE": "yes",
    }


class Ledger(Application[UUID]):
    """Append-only, hash-chained, per-memory sealed. The only authority."""

    name = "memwarden"

    def __init__(self, env: dict[str, str], kek: KeyEncryptionKey, signing_key: SigningKey) -> None:
        self.kek = kek
        self.signing_key = signing_key
        super().__init__(env)
        self.recorder: ChainedApplicationRecorder
        self.datastore: PostgresDatastore = cast(PostgresFactory, self.factory).datastore
        self.schema = self.datastore.schema
        self._committer: GroupCommitter[AppendGroup, GroupResult] = GroupCommitter(
            self.recorder.append_groups
        )
        self.checkpoints = CheckpointSigner(self.datastore, self.schema, signing_key)
        self.checkpoints.register_public_key()

    def construct_mapper(self) -> Mapper[UUID]:
        self.data_keys = DataKeys(self.kek, self._load_wrapped_keys)
        return SealingMapper(self.data_keys)

    @property
    def sealing(self) -> SealingMapper:
        return cast(SealingMapper, self.mapper)

    def _load_wrapped_keys(self, memory_ids: list[UUID]) -> dict[UUID, bytes]:
        datastore = cast(PostgresFactory, self.factory).datastore
        query = SQL("SELECT memory_id, wrapped FROM {}.data_keys WHERE memory_id = ANY(%s)").format(
            Identifier(datastore.schema)
        )
        with datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, (memory_ids,))
            return {row["memory_id"]: bytes(row["wrapped"]) for row in curs.fetchall()}

    def secret(self, name: str) -> bytes:
        """A 32-byte service secret kept wrapped by the KEK in ``secrets``; made once."""
        owner = uuid5(NAMESPACE_URL, f"memwarden:secret:{name}")
        table = SQL("{}.secrets").format(Identifier(self.schema))
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memwarden secret {name}",))
            row = curs.execute(
                SQL("SELECT wrapped FROM {} WHERE name = %s").format(table), (name,)
            ).fetchone()
            if row is not None:
                return unwrap_key(self.kek, owner, bytes(row["wrapped"]))
            value = os.urandom(32)
            curs.execute(
                SQL("INSERT INTO {} (name, kek_id, wrapped) VALUES (%s, %s, %s)").format(table),
                (name, self.kek.key_id, wrap_key(self.kek, owner, value)),
            )
            return value

    def new_data_key(self, memory_id: UUID) -> NewMemoryKey:
        _, wrapped = self.data_keys.create(memory_id)
        return NewMemoryKey(memory_id, wrapped)

    # -- writing -------------------------------------------------------------------------

    def append(self, events: Sequence[Recorded], new_keys: Sequence[NewMemoryKey] = ()) -> int:
        """Append one syscall's events atomically; return the last position.

        Raises StreamConflict when another writer took one of the stream versions.
        """
        stored = [self.sealing.encode(r) for r in events]
        group = AppendGroup(
            events=stored,
            data_keys=[DataKeyRow(k.memory_id, self.kek.key_id, k.wrapped) for k in new_keys],
        )
        result = self._committer.submit(group)
        if result.conflict:
            raise StreamConflict("a stream this append expected to extend has moved on")
        return max(result.positions)

    # -- reading -------------------------------------------------------------------------

    def stream_heads(self, stream_ids: Sequence[UUID]) -> dict[UUID, Recorded]:
        """The latest event of each stream that exists."""
        query = SQL(
            "SELECT DISTINCT ON (originator_id) originator_id, originator_version, topic, state,"
            " notification_id FROM {}.{} WHERE originator_id = ANY(%s)"
            " ORDER BY originator_id, originator_version DESC"
        ).format(Identifier(self.schema), Identifier(EVENTS_TABLE))
        return {r.originator_id: r for r in self._select(query, (list(stream_ids),))}

    def streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[Recorded]]:
        """Every event of each stream, in version order."""
        query = SQL(
            "SELECT originator_id, originator_version, topic, state, notification_id"
            " FROM {}.{} WHERE originator_id = ANY(%s) ORDER BY originator_id, originator_version"
        ).format(Identifier(self.schema), Identifier(EVENTS_TABLE))
        found: dict[UUID, list[Recorded]] = {}
        for recorded in self._select(query, (list(stream_ids),)):
            found.setdefault(recorded.originator_id, []).append(recorded)
        return found

    def read(self, after: int, limit: int, stop: int | None = None) -> list[Recorded]:
        """Events after a position, in ledger order (the notification log)."""
        query = SQL(
            "SELECT originator_id, originator_version, topic, state, notification_id"
            " FROM {}.{} WHERE notification_id > %s AND notification_id <= %s"
            " ORDER BY notification_id LIMIT %s"
        ).format(Identifier(self.schema), Identifier(EVENTS_TABLE))
        upper = stop if stop is not None else 2**62
        return self._select(query, (after, upper, limit))

    def _select(self, query: Any, params: tuple[Any, ...]) -> list[Recorded]:
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params, prepare=True)
            rows = curs.fetchall()
        self.data_keys.prefetch(row["originator_id"] for row in rows if row["topic"] in _SEALED_TOPICS)
        return [
            self.sealing.decode(
                StoredEvent(
                    originator_id=row["originator_id"],
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=bytes(row["state"]),
                ),
                row["notification_id"],
            )
            for row in rows
        ]

    def head_position(self) -> int:
        return self.recorder.head()[0]

    # -- proving -------------------------------------------------------------------------

    def verify(self, checkpoint: Checkpoint | None = None) -> ChainReport:
        """Recompute the chain; with a checkpoint, also prove its head is still there."""
        if checkpoint is None:
            return self.recorder.verify_chain()
        verify_checkpoint_signature(checkpoint, self.checkpoints.public_keys())
        report = self.recorder.verify_chain(stop_at=checkpoint.position)
        if not report.ok:
            return report
        if report.head_position < checkpoint.position or report.head_hash != checkpoint.hash:
            return msgspec.structs.replace(
                report,
                ok=False,
                first_bad_position=min(report.head_position + 1, checkpoint.position),
                problem="the ledger does not reach the checkpoint's head with its hash",
            )
        return self.recorder.verify_chain()

    def checkpoint(self) -> Checkpoint:
        position, head_hash = self.recorder.head()
        return self.checkpoints.sign(position, head_hash)


_SEALED_TOPICS = frozenset(name for name, cls in EVENT_TYPES.items() if cls.SEALED)
