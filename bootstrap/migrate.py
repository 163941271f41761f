"""Numbered schema migrations: ``bootstrap/migrations/NNNN_name.sql``, applied in order.

The schema is made by these files and by nothing else (no constructor runs DDL). Each
pending migration runs in a transaction of its own, recorded in ``schema_migrations``
(version, name, checksum of the file) in that same transaction: a migration that fails
leaves nothing of itself, and the ones before it stay applied. The whole run holds a
session advisory lock, so processes that start together apply each migration once: the
others wait for the lock, then find nothing pending.

A database made before migrations existed (its tables there, no ``schema_migrations``) is
the baseline: the first migrations are written to change nothing on it, so they are
applied as no-ops, recorded, and the report says the database was adopted.

A recorded migration whose file has changed since is refused: what was applied to a
database is history; a change is a new migration.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

import msgspec
import psycopg
from psycopg import Connection
from psycopg.rows import TupleRow
from psycopg.sql import SQL, Composed, Identifier

from memwarden.domain.ledger import locks
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import SCHEMA

log = logging.getLogger(__name__)
MIGRATIONS_DIR = Path(__file__).with_name("migrations")
LOCK_KEY = locks.SCHEMA
"""The advisory lock of schema changes (the key the start-up DDL took before migrations,
so a process of an older version starting meanwhile waits too); held for the session, not
one transaction, since each migration commits on its own."""
TABLE = "schema_migrations"
CONNECT_TIMEOUT_SECONDS = 10
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class MigrationError(Exception):
    """The migrations cannot be applied as they are (a bad file name, a gap in the
    numbers, a file changed after it was applied, a statement that failed)."""


class SchemaNotMigrated(MigrationError):
    """A configured database lacks migrations: the service does not start on it."""


class Migration(msgspec.Struct, frozen=True):
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


class MigrationReport(msgspec.Struct, frozen=True, kw_only=True):
    database: str
    applied: list[str]
    """The migrations this run applied, in order (empty: the database was up to date)."""
    version: int
    """The latest migration the database has now."""
    baseline: bool = False
    """The database was made before migrations (tables there, no ``schema_migrations``)."""


def available(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files, in order; numbered 0001, 0002, … without gaps or repeats."""
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: a migration file is named NNNN_name.sql")
        found.append(Migration(version=int(match[1]), name=match[2], sql=path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migrations must be numbered 1, 2, … without gaps or repeats; found {versions}")
    return found


def migrate(params: ConnectionParams, directory: Path = MIGRATIONS_DIR) -> MigrationReport:
    """Apply every pending migration, each in its own transaction, under the schema lock."""
    migrations = available(directory)
    with _connect(params) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (LOCK_KEY,))
        try:
            baseline = _is_baseline(conn)
            _create_bookkeeping(conn)
            recorded = _recorded(conn)
            _check_unchanged(migrations, recorded)
            applied = [_apply(conn, m) for m in migrations if m.version not in recorded]
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (LOCK_KEY,))
    labels = [m.label for m in applied]
    if labels:
        log.info("database %s: applied migrations %s", params.dbname, ", ".join(labels))
    return MigrationReport(
        database=params.dbname,
        applied=labels,
        version=max([*recorded, *(m.version for m in applied)], default=0),
        baseline=baseline,
    )


def pending(params: ConnectionParams, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations the database lacks (all of them when it has none recorded)."""
    migrations = available(directory)
    with _connect(params) as conn:
        recorded = _recorded(conn) if _has_bookkeeping(conn) else {}
    _check_unchanged(migrations, recorded)
    return [m for m in migrations if m.version not in recorded]


def require_migrated(params: ConnectionParams) -> None:
    """Refuse a configured database that lacks migrations, naming the command that fixes it."""
    missing = pending(params)
    if missing:
        raise SchemaNotMigrated(
            f"the database {params.dbname!r} on {params.host}:{params.port} lacks migrations"
            f" {', '.join(m.label for m in missing)}: run `memwarden migrate` (with the same"
            " DATABASE_URL) before starting memwarden"
        )


def prepare_database(params: ConnectionParams, embedded: bool) -> None:
    """What start-up does to the schema: the embedded default migrates itself; a configured
    database (``DATABASE_URL``) is migrated by its operator, and refused until it is."""
    if embedded:
        migrate(params)
    else:
        require_migrated(params)


def _connect(params: ConnectionParams) -> Connection[TupleRow]:
    return psycopg.connect(params.conninfo(), autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)


def _table() -> Composed:
    return SQL("{}.{}").format(Identifier(SCHEMA), Identifier(TABLE))


def _has_bookkeeping(conn: Connection[TupleRow]) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{SCHEMA}.{TABLE}",)).fetchone()
    return bool(row and row[0])


def _is_baseline(conn: Connection[TupleRow]) -> bool:
    """Tables of the ledger, and no record of migrations: made by the code before them."""
    row = conn.execute(
        "SELECT to_regclass(%s) IS NULL AND to_regclass(%s) IS NOT NULL",
        (f"{SCHEMA}.{TABLE}", f"{SCHEMA}.events"),
    ).fetchone()
    return bool(row and row[0])


def _create_bookkeeping(conn: Connection[TupleRow]) -> None:
    with conn.transaction():
        conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(SCHEMA)))
        conn.execute(
            SQL(
                "CREATE TABLE IF NOT EXISTS {} (version int PRIMARY KEY, name text NOT NULL,"
                " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(_table())
        )


def _recorded(conn: Connection[TupleRow]) -> dict[int, str]:
    rows = conn.execute(SQL("SELECT version, checksum FROM {}").format(_table())).fetchall()
    return {int(version): str(checksum) for version, checksum in rows}


def _check_unchanged(migrations: list[Migration], recorded: dict[int, str]) -> None:
    for migration in migrations:
        checksum = recorded.get(migration.version)
        if checksum is not None and checksum != migration.checksum:
            raise MigrationError(
                f"migration {migration.label} was changed after it was applied to this database;"
                " write a new migration instead"
            )


def _apply(conn: Connection[TupleRow], migration: Migration) -> Migration:
    """One migration and its record, in one transaction (no parameters: the file's several
    statements go in one simple query)."""
    try:
        with conn.transaction():
            conn.execute(migration.sql.encode())
            conn.execute(
                SQL("INSERT INTO {} (version, name, checksum) VALUES (%s, %s, %s)").format(_table()),
                (migration.version, migration.name, migration.checksum),
            )
    except psycopg.Error as error:
        raise MigrationError(f"migration {migration.label} failed: {error}") from error
    return migration
