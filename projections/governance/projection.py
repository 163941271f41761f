"""Governance read models: ``api_keys`` (listing; lookup goes to the ledger stream),
``audit_records`` (the compliance audit trail), ``shares`` and ``pins``."""

from __future__ import annotations

from typing import Any

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import AuditRecorded, KeyIssued, KeyRevoked, MemoryShared, PinSet
from memwarden.projections.governance.views import KEYS_PROJECTION
from memwarden.projections.rows import array_literal, columns
from memwarden.projections.sanitize import sanitized


class KeysProjection:
    name = KEYS_PROJECTION
    tables = ("api_keys",)

    def create(self, curs: Cursor[Any], schema: str) -> None:
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.api_keys (
    key_id text PRIMARY KEY,
    key_hash text NOT NULL,
    namespace text NOT NULL,
    actor text NOT NULL,
    role text NOT NULL,
    issued_by text NOT NULL,
    issued_at timestamptz NOT NULL,
    revoked boolean NOT NULL DEFAULT false,
    revoked_at timestamptz,
    position bigint NOT NULL,
    max_provenance text
)""").format(s=Identifier(schema))
        )
        curs.execute(
            SQL("CREATE INDEX IF NOT EXISTS api_keys_namespace ON {s}.api_keys (namespace)").format(
                s=Identifier(schema)
            )
        )
        curs.execute(
            SQL("CREATE INDEX IF NOT EXISTS api_keys_order ON {s}.api_keys (issued_at, key_id)").format(
                s=Identifier(schema)
            )
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, (KeyIssued, KeyRevoked))
        s = Identifier(schema)
        for r in events:
            e = r.event
            if isinstance(e, KeyIssued):
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.api_keys (key_id, key_hash, namespace, actor, role, issued_by,"
                        " issued_at, position, max_provenance) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                        " ON CONFLICT (key_id) DO NOTHING"
                    ).format(s=s),
                    (
                        e.key_id,
                        e.key_hash,
                        e.namespace,
                        e.actor,
                        e.role,
                        e.issued_by,
                        e.at,
                        r.position,
                        e.max_provenance,
                    ),
                )
            elif isinstance(e, KeyRevoked):
                curs.execute(
                    SQL(
                        "UPDATE {s}.api_keys SET revoked = true, revoked_at = %s, position = %s"
                        " WHERE key_id = %s"
                    ).format(s=s),
                    (e.at, r.position, e.key_id),
                )


class AuditProjection:
    name = "audit"
    tables = ("audit_records",)

    def create(self, curs: Cursor[Any], schema: str) -> None:
        s = Identifier(schema)
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.audit_records (
    position bigint PRIMARY KEY,
    record_id uuid NOT NULL,
    time timestamptz NOT NULL,
    actor text NOT NULL,
    namespace text NOT NULL,
    role text NOT NULL,
    op text NOT NULL,
    outcome text NOT NULL,
    detail text NOT NULL,
    subject_ids uuid[] NOT NULL DEFAULT '{{}}'
)""").format(s=s)
        )
        curs.execute(
            SQL(
                "CREATE INDEX IF NOT EXISTS audit_records_namespace ON {s}.audit_records"
                " (namespace text_pattern_ops, position)"
            ).format(s=s)
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, (AuditRecorded,))
        rows = [
            (
                r.position,
                e.record_id,
                e.at,
                e.actor,
                e.namespace,
                e.role,
                e.op,
                e.outcome,
                e.detail,
                array_literal(e.subject_ids),
            )
            for r in events
            if isinstance((e := r.event), AuditRecorded)
        ]
        if rows:
            curs.execute(
                SQL(
                    "INSERT INTO {s}.audit_records (position, record_id, time, actor, namespace, role, op,"
                    " outcome, detail, subject_ids) SELECT position, record_id, time, actor, namespace, role,"
                    " op, outcome, detail, subject_ids::uuid[] FROM unnest(%b::bigint[], %b::uuid[],"
                    " %b::timestamptz[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                    " %b::text[]) AS a(position, record_id, time, actor, namespace, role, op, outcome, detail,"
                    " subject_ids) ON CONFLICT (position) DO NOTHING"
                ).format(s=Identifier(schema)),
                columns(rows),
            )


class SharesProjection:
    name = "shares"
    tables = ("shares", "pins")

    def create(self, curs: Cursor[Any], schema: str) -> None:
        s = Identifier(schema)
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.shares (
    share_id uuid PRIMARY KEY,
    memory_id uuid NOT NULL,
    memory_namespace text NOT NULL,
    namespace text NOT NULL,
    shared_by text NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL
)""").format(s=s)
        )
        curs.execute(
            SQL("CREATE INDEX IF NOT EXISTS shares_namespace ON {s}.shares (namespace, memory_id)").format(
                s=s
            )
        )
        curs.execute(
            SQL("""
CREATE TABLE IF NOT EXISTS {s}.pins (
    namespace text NOT NULL,
    memory_id uuid NOT NULL,
    pinned_by text NOT NULL,
    at timestamptz NOT NULL,
    position bigint NOT NULL,
    PRIMARY KEY (namespace, memory_id)
)""").format(s=s)
        )

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, (MemoryShared, PinSet))
        s = Identifier(schema)
        for r in events:
            e = r.event
            if isinstance(e, MemoryShared):
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.shares (share_id, memory_id, memory_namespace, namespace, shared_by,"
                        " at, position) VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
                    ).format(s=s),
                    (e.share_id, e.memory_id, e.memory_namespace, e.with_namespace, e.by, e.at, r.position),
                )
            elif isinstance(e, PinSet) and e.pinned:
                curs.execute(
                    SQL(
                        "INSERT INTO {s}.pins (namespace, memory_id, pinned_by, at, position)"
                        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (namespace, memory_id) DO UPDATE"
                        " SET pinned_by = EXCLUDED.pinned_by, at = EXCLUDED.at, position = EXCLUDED.position"
                    ).format(s=s),
                    (e.namespace, e.memory_id, e.by, e.at, r.position),
                )
            elif isinstance(e, PinSet):
                curs.execute(
                    SQL("DELETE FROM {s}.pins WHERE namespace = %s AND memory_id = %s").format(s=s),
                    (e.namespace, e.memory_id),
                )
