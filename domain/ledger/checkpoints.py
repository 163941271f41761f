"""Signed checkpoints of the chain head: (position, hash, time), ed25519.

Public keys are kept by id in ``signing_keys`` so a checkpoint (or certificate)
signed before a key rotation still verifies. Every checkpoint the ledger signs is kept in
``checkpoints`` (beside the chain, not on it: keeping one appends no event), so compliance
staff can list them and anyone holding one can check it against the chain later.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.keys import SigningKey, public_key_bytes


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    position: int
    hash: str
    time: datetime
    key_id: str
    signature: str

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
        self.table = SQL("{}.checkpoints").format(Identifier(schema))

    def keep(self, checkpoint: Checkpoint) -> None:
        with self.datastore.get_connection() as conn:
            conn.execute(
                SQL(
                    "INSERT INTO {} (position, hash, time, key_id, signature) VALUES (%s, %s, %s, %s, %s)"
                ).format(self.table),
                (
                    checkpoint.position,
                    checkpoint.hash,
                    checkpoint.time,
                    checkpoint.key_id,
                    checkpoint.signature,
                ),
            )

    def newest(self, limit: int, before: int | None = None) -> list[KeptCheckpoint]:
        """Up to ``limit`` checkpoints, newest first; with ``before``, those kept before that seq."""
        query = SQL(
            "SELECT id, position, hash, time, key_id, signature FROM {}"
            " WHERE %(before)s::bigint IS NULL OR id < %(before)s ORDER BY id DESC LIMIT %(limit)s"
        ).format(self.table)
        with self.datastore.get_connection() as conn:
            rows = conn.execute(query, {"before": before, "limit": limit}).fetchall()
        return [
            KeptCheckpoint(
                seq=row["id"],
                checkpoint=Checkpoint(
                    position=row["position"],
                    hash=row["hash"],
                    time=row["time"].astimezone(UTC),
                    key_id=row["key_id"],
                    signature=row["signature"],
                ),
            )
            for row in rows
        ]
