"""The preimage of a leaf: a ledger position's canonical record (what the tree hashed), and
the position of a certificate's ErasureCertified event, so a proof file can carry the record
and bind the proven leaf to the document an auditor holds (memwarden_client/records.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.chain import canonical

CERTIFIED_TOPIC = "ErasureCertified"
RECORD_COLUMNS = "notification_id, originator_id, originator_version, topic, state"
"""The columns of an events row that its canonical record is made of."""


def record_of(row: Mapping[str, Any]) -> bytes:
    """The chain's canonical form of an events row (``RECORD_COLUMNS``; ciphertext included)."""
    return canonical(
        int(row["notification_id"]),
        UUID(str(row["originator_id"])),
        int(row["originator_version"]),
        str(row["topic"]),
        bytes(row["state"]),
    )


def certificate_position(datastore: PostgresDatastore, schema: str, certificate_id: UUID) -> int | None:
    """The ledger position of certificate ``certificate_id``'s ErasureCertified event."""
    with datastore.get_connection() as conn:
        row = conn.execute(
            SQL(
                "SELECT notification_id FROM {s}.events WHERE originator_id = %s AND topic = %s"
                " ORDER BY notification_id LIMIT 1"
            ).format(s=Identifier(schema)),
            (certificate_id, CERTIFIED_TOPIC),
        ).fetchone()
    return None if row is None else int(row["notification_id"])
