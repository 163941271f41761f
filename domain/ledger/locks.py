"""The advisory-lock keys, named once, and the two ways to take one.

Every lock here is transaction-scoped (``pg_advisory_xact_lock``): it is released when the
transaction that took it ends, so no crash can leave one held. A key is text hashed by
PostgreSQL's ``hashtext``; two sites serialise on each other exactly when they name the
same key, which is why no site spells one out.
"""

from __future__ import annotations

from typing import Any, NewType

from psycopg import Connection, Cursor

LockKey = NewType("LockKey", str)
"""The text a ``hashtext`` advisory lock is keyed by."""

SCHEMA = LockKey("memwarden schema")
"""Held while creating or changing tables, so processes starting together do not race."""

PROJECTIONS = LockKey("memwarden projections")
"""Held by the one runner applying a batch, and by a rebuild while it switches tables."""


SEQUENCE = LockKey("memwarden ledger sequence")
"""Held by whatever hands out global positions, until it commits: ``mw_append`` (a
single chain) and ``mw_sequence`` (chains per tenant), both in
bootstrap/migrations/0005_tenant_chains.sql, which spells the key out."""


def secret(name: str) -> LockKey:
    """Held while a service secret is looked up and, the first time, made."""
    return LockKey(f"memwarden secret {name}")


_HOLD = "SELECT pg_advisory_xact_lock(hashtext(%s))"
_TRY = "SELECT pg_try_advisory_xact_lock(hashtext(%s)) AS ok"


def hold(target: Cursor[Any] | Connection[Any], key: LockKey) -> None:
    """Wait for ``key`` and hold it until the current transaction ends."""
    target.execute(_HOLD, (key,))


def try_hold(conn: Connection[Any], key: LockKey) -> bool:
    """Take ``key`` for the current transaction if nobody holds it; never waits."""
    row = conn.execute(_TRY, (key,)).fetchone()
    return bool(row and row["ok"])
