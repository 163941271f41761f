"""The ledger: an eventsourcing application on PostgreSQL, chained, sealed, group-committed."""

from __future__ import annotations

import base64
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec
from eventsourcing.application import Application
from eventsourcing.persistence import InfrastructureFactory, IntegrityError, Mapper, StoredEvent
from eventsourcing.postgres import PostgresDatastore, PostgresFactory
from eventsourcing.utils import Environment
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger import locks
from memwarden.domain.ledger.audit_spool import AuditSpool
from memwarden.domain.ledger.certificates import (
    CertificateCheck,
    check_certificate_signature,
    sign_certificate,
)
from memwarden.domain.ledger.chain import ChainReport
from memwarden.domain.ledger.checkpoints import (
    Checkpoint,
    CheckpointLog,
    CheckpointSigner,
    verify_checkpoint_signature,
)
from memwarden.domain.ledger.database import UTC_SESSION, ConnectionCheck, ConnectionParams, unavailable
from memwarden.domain.ledger.group_commit import CommitterPerKey, GroupCommitter
from memwarden.domain.ledger.keys import KeyEncryptionKey, SigningKey
from memwarden.domain.ledger.mapper import Recorded, SealingMapper, StoredRow
from memwarden.domain.ledger.notes import default_origin, log_vkey, signed_checkpoint
from memwarden.domain.ledger.recorder import (
    EVENTS_TABLE,
    AppendGroup,
    ChainedApplicationRecorder,
    DataKeyRow,
    GroupResult,
)
from memwarden.domain.ledger.sealing import DataKeys, unwrap_key, wrap_key
from memwarden.domain.ledger.sequencer import PendingSequencer
from memwarden.domain.model.certificates import DeletionCertificate
from memwarden.domain.model.events import (
    EVENT_TYPES,
    AuditRecorded,
    ErasureCertified,
    KnowledgeErased,
    MemoryErased,
)
from memwarden.domain.model.merkle import EMPTY_ROOT
from memwarden.domain.model.namespaces import ANONYMOUS_TENANT, tenant_of
from memwarden.domain.settings import AUDIT_SPOOL_MAX_BYTES, LEDGER_CHAINS, SCHEMA


class StreamConflict(Exception):
    """Another writer took a stream version this append expected to take. Re-decide."""


class NewMemoryKey:
    """A data key created for this append: a new memory's, or a knowledge document's (with
    its first sealed version). Stored by the append, in the same transaction."""

    __slots__ = ("key", "owner", "wrapped")

    def __init__(self, owner: UUID, key: bytes, wrapped: bytes) -> None:
        self.owner = owner
        self.key = key
        self.wrapped = wrapped


def ledger_env(params: ConnectionParams, pool_size: int = 8, timeout_seconds: float = 3.0) -> dict[str, str]:
    """The eventsourcing environment. ``timeout_seconds`` bounds both a wait for a pooled
    connection and a connection attempt, so a request fails fast when the database is down."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "APPLICATION_RECORDER_TOPIC": "memwarden.domain.ledger.recorder:ChainedApplicationRecorder",
        "POSTGRES_DBNAME": params.dbname,
        "POSTGRES_HOST": params.host,
        "POSTGRES_PORT": params.port,
        "POSTGRES_USER": params.user,
        "POSTGRES_PASSWORD": params.password,
        "POSTGRES_SCHEMA": SCHEMA,
        "POSTGRES_POOL_SIZE": str(pool_size),
        "POSTGRES_MAX_OVERFLOW": str(pool_size * 2),
        "POSTGRES_CONNECT_TIMEOUT": str(max(1, math.ceil(timeout_seconds))),  # whole seconds
        "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "30",
        # A pooled connection is checked before it is handed out: after the server restarted,
        # requests get new connections, not the dead ones (``ConnectionCheck``: a round trip
        # only for a connection whose socket the server closed or one long idle).
        "POSTGRES_PRE_PING": "yes",
        # The schema is the migrations' (bootstrap/migrate.py), never made by a constructor.
        "CREATE_TABLE": "no",
    }


class TenantTree(msgspec.Struct, frozen=True):
    """A tenant's tree as a checkpoint signs it: whose, how many leaves, its root of a size."""

    tenant: str
    size: int
    root_of: Callable[[int], bytes]


def _no_root(_size: int) -> bytes:
    raise ValueError("no tree to sign")


class Ledger(Application[UUID]):
    """Append-only, hash-chained, sealed per memory and per document. The only authority."""

    name = "memwarden"
    audit_spool: AuditSpool | None = None
    """Where the audit records this ledger cannot take now wait for it (``spool_directory``)."""

    def __init__(
        self,
        env: dict[str, str],
        kek: KeyEncryptionKey,
        signing_key: SigningKey,
        chains: str = "global",
        statement_timeout_seconds: float | None = None,
        origin: str | None = None,
        spool_directory: Path | None = None,
        spool_max_bytes: int = AUDIT_SPOOL_MAX_BYTES,
    ) -> None:
        """``chains``: ``MEMWARDEN_LEDGER_CHAINS``, ``global`` (one chain, one lock for every
        tenant) or ``tenant`` (a chain per tenant as well, sequenced onto the global one).
        ``spool_directory``: where the audit records wait that the ledger cannot take now
        (none: such a record's call is refused); the spool appends them to this ledger, so
        the ledger makes it."""
        if chains not in LEDGER_CHAINS:
            raise ValueError(f"ledger chains must be one of {', '.join(LEDGER_CHAINS)}, not {chains!r}")
        self.kek = kek
        self.signing_key = signing_key
        self.origin = origin or default_origin(signing_key)
        """The transparency log's name: the first line of every checkpoint note."""
        self._statement_timeout_seconds = statement_timeout_seconds
        super().__init__(env)
        self.recorder: ChainedApplicationRecorder
        self.datastore: PostgresDatastore = cast(PostgresFactory, self.factory).datastore
        self.schema = self.datastore.schema
        self.tenant_chains = self.recorder.tenant_chains = chains == "tenant"
        self._committer: GroupCommitter[AppendGroup, GroupResult] = GroupCommitter(
            self.recorder.append_groups, fails_queue=unavailable
        )
        self._tenant_committers: CommitterPerKey[AppendGroup, GroupResult] = CommitterPerKey(
            lambda: GroupCommitter(self.recorder.append_groups, fails_queue=unavailable)
        )
        self.checkpoints = CheckpointSigner(self.datastore, self.schema, signing_key)
        self.checkpoints.register_public_key()
        self.checkpoint_log = CheckpointLog(self.datastore, self.schema)
        if spool_directory is not None:
            self.audit_spool = AuditSpool(
                spool_directory,
                self.append_spooled,
                lambda error: isinstance(error, StreamConflict),
                spool_max_bytes,
            )
        self.sequencer = PendingSequencer(self.recorder) if self.tenant_chains else None
        """Sequences what a tenant-chain appender that died left pending (its own thread)."""
        if self.sequencer is not None:
            self.sequencer.start()

    def close(self) -> None:
        if self.audit_spool is not None:
            self.audit_spool.close()
        sequencer = getattr(self, "sequencer", None)  # absent when the constructor failed early
        if sequencer is not None:
            sequencer.stop()
        super().close()

    def construct_factory(self, env: Environment) -> InfrastructureFactory:
        """The library's factory, its pool tuned before the pool opens: a connection made
        later would miss a setting changed on an open pool (its attempt was under way)."""
        factory = super().construct_factory(env)
        pool = cast(PostgresFactory, factory).datastore.pool
        # A connection attempt that failed is retried with a growing delay (1, 2, 4 … s)
        # for this long before the pool gives up; the next request then tries at once.
        # The library's default (5 minutes) would keep a recovered database unused for
        # up to minutes after an outage.
        pool.reconnect_timeout = pool.timeout
        if pool._check is not None:  # POSTGRES_PRE_PING: the same check, without most round trips
            pool._check = ConnectionCheck()
        options = [UTC_SESSION]
        if self._statement_timeout_seconds is not None:
            milliseconds = max(1, round(self._statement_timeout_seconds * 1000))
            options.append(f"-c statement_timeout={milliseconds}")
        assert isinstance(pool.kwargs, dict)  # the datastore passes a plain mapping
        pool.kwargs = {**pool.kwargs, "options": " ".join(options)}
        return factory

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
            locks.hold(curs, locks.secret(name))
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

    def new_data_key(self, owner: UUID) -> NewMemoryKey:
        """A new data key for ``owner`` (a memory or a document), to be stored by the append
        that first seals with it (``new_keys``)."""
        key, wrapped = self.data_keys.create(owner)
        return NewMemoryKey(owner, key, wrapped)

    # -- writing -------------------------------------------------------------------------

    def append(
        self,
        events: Sequence[Recorded],
        new_keys: Sequence[NewMemoryKey] = (),
        destroy_keys: Sequence[UUID] = (),
        *,
        tenant: str,
    ) -> int:
        """Append one syscall's events atomically; return the last (global) position.

        ``tenant``: the syscall's tenant, whose chain the events go on with a chain per
        tenant (``tenant_of`` its namespace).
        ``new_keys``: data keys stored in the same transaction; the events are sealed with
        them, and they are cached once committed. ``destroy_keys``: owners whose data keys
        are deleted in the same transaction (erasure); they are dropped from this process's
        key cache once committed.
        Raises StreamConflict when another writer took one of the stream versions.
        """
        versions = {(r.originator_id, r.originator_version) for r in events}
        if len(versions) < len(events):
            # refused here, alone: in the database it would fail the whole commit group, and
            # with it the appends of other writers batched beside this one
            raise IntegrityError("a stream version is named twice in this append")
        fresh = {k.owner: k.key for k in new_keys}
        stored = [self.sealing.encode(r, fresh) for r in events]
        group = AppendGroup(
            events=stored,
            tenant=tenant,
            data_keys=[DataKeyRow(k.owner, self.kek.key_id, k.wrapped) for k in new_keys],
            destroy_keys=list(destroy_keys),
        )
        if self.tenant_chains:
            result = self._tenant_committers.submit(tenant, group)
        else:
            result = self._committer.submit(group)
        if result.conflict:
            raise StreamConflict("a stream this append expected to extend has moved on")
        self.data_keys.remember(fresh.items())
        if destroy_keys:
            self.data_keys.forget(destroy_keys)
        return max(result.positions)

    def append_spooled(self, record: AuditRecorded) -> None:
        """Append an audit record that waited in the spool, under its own id: a second
        append of it is a ``StreamConflict``, never a second record."""
        tenant = tenant_of(record.namespace) if record.namespace else ANONYMOUS_TENANT
        self.append([Recorded(record.record_id, 1, record)], tenant=tenant)

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
            "SELECT originator_id, originator_version, topic, state, notification_id, tenant, tenant_position"
            " FROM {}.{} WHERE notification_id > %s AND notification_id <= %s"
            " ORDER BY notification_id LIMIT %s"
        ).format(Identifier(self.schema), Identifier(EVENTS_TABLE))
        upper = stop if stop is not None else 2**62
        return self._select(query, (after, upper, limit), with_rows=True)

    def _select(self, query: Any, params: tuple[Any, ...], *, with_rows: bool = False) -> list[Recorded]:
        """The events of ``query``'s rows; ``with_rows``: each keeps its row (``StoredRow``:
        the query selects tenant and tenant_position too)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(query, params, prepare=True)
            rows = curs.fetchall()
        erased = [row["originator_id"] for row in rows if row["topic"] in _ERASED_TOPICS]
        if erased:  # another process may have erased them: never trust a cached key
            self.data_keys.forget(erased)
        # a sealed event's owner is its own stream (a memory, a document): fetch their keys at once
        self.data_keys.prefetch(row["originator_id"] for row in rows if row["topic"] in _SEALED_TOPICS)
        found = []
        for row in rows:
            state = bytes(row["state"])
            stored = (
                StoredRow(row["topic"], state, row["tenant"], row["tenant_position"]) if with_rows else None
            )
            found.append(
                self.sealing.decode(
                    StoredEvent(
                        originator_id=row["originator_id"],
                        originator_version=row["originator_version"],
                        topic=row["topic"],
                        state=state,
                    ),
                    row["notification_id"],
                    stored,
                )
            )
        return found

    def oldest_pending(self) -> tuple[str, int] | None:
        return self.recorder.oldest_pending()

    def head_position(self) -> int:
        return self.recorder.head()[0]

    # -- proving -------------------------------------------------------------------------

    def verify(self, checkpoint: Checkpoint | None = None) -> ChainReport:
        """Recompute the chain; with a checkpoint, also prove its head is still there."""
        if checkpoint is None:
            return self.recorder.verify_chain()
        verify_checkpoint_signature(checkpoint, self.checkpoints.public_keys())
        return self.recorder.verify_chain(anchor=(checkpoint.position, checkpoint.hash))

    def checkpoint(
        self, root_of: Callable[[int], bytes] | None = None, tree: TenantTree | None = None
    ) -> Checkpoint:
        """Sign the head and keep the checkpoint (GET compliance/checkpoints lists it). With
        ``root_of`` (the Merkle tree's root of a size, from its read model), also as a C2SP
        signed note of (origin, size, root) with the chain head as an extension line. With
        ``tree``, the note is of that tenant's tree (its own origin), kept under its name."""
        position, head_hash = self.recorder.head()
        checkpoint = self.checkpoints.sign(position, head_hash)
        if root_of is not None or tree is not None:
            size = tree.size if tree is not None else position
            root = (tree.root_of if tree is not None else root_of or _no_root)(size) if size else EMPTY_ROOT
            head = f"memwarden-chain {position} {head_hash.hex()} {checkpoint.time.isoformat()}"
            origin = self.origin_of(tree.tenant if tree is not None else None)
            note = signed_checkpoint(self.signing_key, origin, size, root, (head,))
            checkpoint = msgspec.structs.replace(
                checkpoint, size=size, root=base64.b64encode(root).decode(), note=note
            )
        self.checkpoint_log.keep(checkpoint, tree.tenant if tree is not None else None)
        return checkpoint

    def origin_of(self, tenant: str | None) -> str:
        """The log's origin, or the origin of a tenant's tree (the log's, then the tenant)."""
        return self.origin if tenant is None else f"{self.origin}/{tenant}"

    def vkey_of(self, tenant: str | None = None) -> str:
        """The verifier key of the notes of the log's tree, or of a tenant's."""
        return log_vkey(self.origin_of(tenant), self.signing_key)

    @property
    def vkey(self) -> str:
        """The verifier key of this log's checkpoint notes (signed-note format)."""
        return self.vkey_of(None)

    # -- erasure --------------------------------------------------------------------------

    def sign_certificate(self, certificate: DeletionCertificate) -> DeletionCertificate:
        return sign_certificate(certificate, self.signing_key)

    def certificate(self, certificate_id: UUID) -> DeletionCertificate | None:
        """The certificate as recorded in the ledger (its ErasureCertified event)."""
        events = self.streams([certificate_id]).get(certificate_id, [])
        for recorded in events:
            if isinstance(recorded.event, ErasureCertified):
                return recorded.event.certificate
        return None

    def verify_certificate(self, certificate: DeletionCertificate) -> CertificateCheck:
        """Valid when the signature verifies (any key this ledger ever used), the fields
        agree, the ledger recorded exactly this certificate, and the chain still holds
        the head it names."""
        check = check_certificate_signature(certificate, self.checkpoints.public_keys())
        if not check.valid:
            return check
        recorded = self.certificate(certificate.id)
        if recorded is None:
            return CertificateCheck(valid=False, problem="the ledger holds no such certificate")
        if msgspec.json.encode(recorded) != msgspec.json.encode(certificate):
            return CertificateCheck(valid=False, problem="the certificate differs from the one in the ledger")
        query = SQL("SELECT hash FROM {}.ledger_chain WHERE position = %s").format(Identifier(self.schema))
        with self.datastore.get_connection() as conn:
            row = conn.execute(query, (certificate.ledger_position,)).fetchone()
        at_position = bytes(row["hash"]).hex() if row is not None else bytes(32).hex()
        if at_position != certificate.ledger_hash:
            return CertificateCheck(valid=False, problem="the ledger's hash at that position differs")
        return CertificateCheck(valid=True)

    def rotate_kek(self, new_kek: KeyEncryptionKey, batch: int = 5_000) -> tuple[int, int]:
        """Rewrap every data key and service secret with ``new_kek`` in one transaction.

        The ledger is not touched. Returns (data keys, secrets) rewrapped. Run it with
        the service stopped: a process still holding the old KEK would wrap new keys
        with it (each row keeps its ``kek_id``, so such rows are found and refused).
        """
        old = self.kek
        s = Identifier(self.schema)
        rewrapped_keys = rewrapped_secrets = 0
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(SQL("LOCK TABLE {s}.data_keys, {s}.secrets IN EXCLUSIVE MODE").format(s=s))
            stray = curs.execute(
                SQL("SELECT count(*) AS n FROM {s}.data_keys WHERE kek_id NOT IN (%s, %s)").format(s=s),
                (old.key_id, new_kek.key_id),
            ).fetchone()
            if stray is not None and int(stray["n"]):
                msg = (
                    f"{stray['n']} data keys are wrapped by a KEK that is neither the current nor the new one"
                )
                raise ValueError(msg)
            after: UUID | None = None
            while True:
                rows = curs.execute(
                    SQL(
                        "SELECT memory_id, wrapped FROM {s}.data_keys WHERE kek_id = %s"
                        " AND (%s::uuid IS NULL OR memory_id > %s::uuid) ORDER BY memory_id LIMIT %s"
                    ).format(s=s),
                    (old.key_id, after, after, batch),
                ).fetchall()
                if not rows:
                    break
                ids = [row["memory_id"] for row in rows]
                wrapped = [
                    wrap_key(
                        new_kek, row["memory_id"], unwrap_key(old, row["memory_id"], bytes(row["wrapped"]))
                    )
                    for row in rows
                ]
                curs.execute(
                    SQL(
                        "UPDATE {s}.data_keys d SET kek_id = %s, wrapped = u.w"
                        " FROM unnest(%s::uuid[], %s::bytea[]) AS u(id, w) WHERE d.memory_id = u.id"
                    ).format(s=s),
                    (new_kek.key_id, ids, wrapped),
                )
                rewrapped_keys += len(rows)
                after = ids[-1]
            for row in curs.execute(
                SQL("SELECT name, wrapped FROM {s}.secrets WHERE kek_id = %s").format(s=s), (old.key_id,)
            ).fetchall():
                owner = uuid5(NAMESPACE_URL, f"memwarden:secret:{row['name']}")
                value = unwrap_key(old, owner, bytes(row["wrapped"]))
                curs.execute(
                    SQL("UPDATE {s}.secrets SET kek_id = %s, wrapped = %s WHERE name = %s").format(s=s),
                    (new_kek.key_id, wrap_key(new_kek, owner, value), row["name"]),
                )
                rewrapped_secrets += 1
        self.kek = new_kek
        self.data_keys.rekey(new_kek)
        return rewrapped_keys, rewrapped_secrets


_SEALED_TOPICS = frozenset(name for name, cls in EVENT_TYPES.items() if cls.SEALED)
_ERASED_TOPICS = frozenset({MemoryErased.__name__, KnowledgeErased.__name__})
