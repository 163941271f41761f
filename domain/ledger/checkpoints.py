"""Signed checkpoints of the chain head: (position, hash, time), ed25519.

Public keys are kept by id in ``signing_keys`` so a checkpoint (or certificate)
signed before a key rotation still verifies. Every checkpoint the ledger signs is kept in
``checkpoints`` (beside the chain, not on it: keeping one appends no event), so compliance
staff can list them and anyone holding one can check it against the chain later.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Composable, Identifier

from memwarden.domain.ledger.keys import SigningKey, public_key_bytes


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    position: int
    hash: str
    time: datetime
    key_id: str
    signature: str
    size: int | None = None
    """The Merkle tree's size (= ``position``); None on checkpoints made before the tree."""
    root: str | None = None
    """The RFC 6962 root of the first ``size`` events, base64."""
    note: str | None = None
    """The C2SP signed note of (origin, size, root), chain head as an extension line, with the
    log's signature and every witness cosignature kept beside it."""

    def message(self) -> bytes:
        return checkpoint_message(self.position, self.hash, self.time)


class InvalidCheckpoint(Exception):
    """The checkpoint's signature does not verify, or its key is unknown."""


def checkpoint_message(position: int, head_hash: str, time: datetime) -> bytes:
    return msgspec.json.encode(
        {
            "kind": "memwarden-checkpoint-v1",
            "position": position,
            "hash": head_hash,
            "time": time.astimezone(UTC).isoformat(),
        }
    )


def verify_signature(
    public_keys: dict[str, bytes], key_id: str, signature: str, message: bytes, what: str = "checkpoint"
) -> None:
    """Check an ed25519 signature (base64) by one of this ledger's keys, or raise."""
    raw = public_keys.get(key_id)
    if raw is None:
        raise InvalidCheckpoint(f"unknown signing key {key_id!r}")
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(base64.b64decode(signature), message)
    except (InvalidSignature, ValueError) as error:
        raise InvalidCheckpoint(f"the {what}'s signature does not verify") from error


def verify_checkpoint_signature(checkpoint: Checkpoint, public_keys: dict[str, bytes]) -> None:
    verify_signature(public_keys, checkpoint.key_id, checkpoint.signature, checkpoint.message())


class CheckpointSigner:
    def __init__(self, datastore: PostgresDatastore, schema: str, key: SigningKey) -> None:
        self.datastore = datastore
        self.schema = Identifier(schema)
        self.key = key

    def register_public_key(self) -> None:
        with self.datastore.get_connection() as conn:
            conn.execute(
                SQL(
                    "INSERT INTO {}.signing_keys (key_id, public_key) VALUES (%s, %s)"
                    " ON CONFLICT (key_id) DO NOTHING"
                ).format(self.schema),
                (self.key.key_id, public_key_bytes(self.key.public_key)),
            )

    def public_keys(self) -> dict[str, bytes]:
        with self.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT key_id, public_key FROM {}.signing_keys").format(self.schema)
            ).fetchall()
        return {row["key_id"]: bytes(row["public_key"]) for row in rows}

    def sign(self, position: int, head_hash: bytes, now: datetime | None = None) -> Checkpoint:
        time = (now or datetime.now(UTC)).astimezone(UTC)
        hex_hash = head_hash.hex()
        signature = self.key.sign(checkpoint_message(position, hex_hash, time))
        return Checkpoint(
            position=position,
            hash=hex_hash,
            time=time,
            key_id=self.key.key_id,
            signature=base64.b64encode(signature).decode(),
        )


class KeptCheckpoint(msgspec.Struct, frozen=True):
    """A checkpoint as the ledger keeps it: ``seq`` orders them (newest highest)."""

    seq: int
    checkpoint: Checkpoint


class CheckpointLog:
    """The checkpoints this ledger signed, kept in ``checkpoints``."""

    def __init__(self, datastore: PostgresDatastore, schema: str) -> None:
        self.datastore = datastore
        self.schema = Identifier(schema)
        self.table = SQL("{}.checkpoints").format(Identifier(schema))

    def keep(self, checkpoint: Checkpoint, tree: str | None = None) -> None:
        """Keep a checkpoint of the ledger's tree, or (``tree``) of that tenant's."""
        with self.datastore.get_connection() as conn:
            conn.execute(
                SQL(
                    "INSERT INTO {} (position, hash, time, key_id, signature, size, note, tree)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                ).format(self.table),
                (
                    checkpoint.position,
                    checkpoint.hash,
                    checkpoint.time,
                    checkpoint.key_id,
                    checkpoint.signature,
                    checkpoint.size,
                    checkpoint.note,
                    tree,
                ),
            )

    def newest(self, limit: int, before: int | None = None, tree: str | None = None) -> list[KeptCheckpoint]:
        """Up to ``limit`` checkpoints of the ledger's tree (or of tenant ``tree``'s), newest
        first; with ``before``, those kept before that seq. A note carries the witnesses'
        cosignatures kept beside it."""
        return self.listed(limit, before, tree, newest=True)

    def listed(self, limit: int, past: int | None, tree: str | None, *, newest: bool) -> list[KeptCheckpoint]:
        """Up to ``limit`` checkpoints of a tree, newest or oldest first, past seq ``past``
        (before it newest first, after it oldest first)."""
        order, beyond = ("DESC", "<") if newest else ("ASC", ">")
        return self._select(
            SQL(
                "WHERE (%(past)s::bigint IS NULL OR c.id " + beyond + " %(past)s)"
                " AND c.tree IS NOT DISTINCT FROM %(tree)s ORDER BY c.id " + order + " LIMIT %(limit)s"
            ),
            {"past": past, "limit": limit, "tree": tree},
        )

    def with_size(self, size: int | None, tree: str | None = None) -> KeptCheckpoint | None:
        """The newest signed-note checkpoint of a tree of ``size`` leaves (None: of any size),
        if any."""
        found = self._select(
            SQL(
                "WHERE (%(size)s::bigint IS NULL OR c.size = %(size)s) AND c.note IS NOT NULL"
                " AND c.tree IS NOT DISTINCT FROM %(tree)s ORDER BY c.id DESC LIMIT 1"
            ),
            {"size": size, "tree": tree},
        )
        return found[0] if found else None

    def cosign(self, seq: int, witness: str, line: str, signed_at: datetime) -> bool:
        """Keep a witness's cosignature beside checkpoint ``seq``; False when it had one already."""
        with self.datastore.get_connection() as conn:
            done = conn.execute(
                SQL(
                    "INSERT INTO {}.cosignatures (checkpoint_id, witness, line, signed_at) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING"
                ).format(self.schema),
                (seq, witness, line, signed_at),
            )
            return done.rowcount == 1

    def _select(self, where: Composable, params: dict[str, object]) -> list[KeptCheckpoint]:
        query = (
            SQL(
                "SELECT c.id, c.position, c.hash, c.time, c.key_id, c.signature, c.size, c.note,"
                " coalesce((SELECT array_agg(s.line ORDER BY s.witness) FROM {s}.cosignatures s"
                " WHERE s.checkpoint_id = c.id), '{{}}') AS cosignatures FROM {t} c "
            ).format(s=self.schema, t=self.table)
            + where
        )
        with self.datastore.get_connection() as conn:
            rows = conn.execute(query, params).fetchall()
        return [KeptCheckpoint(seq=row["id"], checkpoint=_checkpoint(row)) for row in rows]


def _checkpoint(row: dict[str, Any]) -> Checkpoint:
    note: str | None = row["note"]
    if note is not None and row["cosignatures"]:
        note += "".join(f"{line}\n" for line in row["cosignatures"])
    return Checkpoint(
        position=row["position"],
        hash=row["hash"],
        time=row["time"].astimezone(UTC),
        key_id=row["key_id"],
        signature=row["signature"],
        size=row["size"],
        root=note.split("\n")[2] if note is not None else None,
        note=note,
    )
