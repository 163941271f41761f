"""`memwarden migrate`: apply the pending schema migrations to the configured database
(``DATABASE_URL``), or to the embedded default's, and say which were applied."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the database driver only when a command needs it (api/cli/main.py)
    from memwarden.bootstrap.migrate import MigrationReport
    from memwarden.domain.settings import Settings


def cmd_migrate(args: argparse.Namespace) -> int:
    import msgspec  # noqa: PLC0415 - see api/cli/main.py on imports
    import psycopg  # noqa: PLC0415

    from memwarden.bootstrap.migrate import MigrationError, migrate  # noqa: PLC0415
    from memwarden.domain.ledger.database import resolve_database  # noqa: PLC0415
    from memwarden.domain.settings import Settings  # noqa: PLC0415

    params, server = resolve_database(Settings.from_env())
    try:
        report = migrate(params)
    except MigrationError as error:
        sys.stderr.write(f"memwarden migrate: {error}\n")
        return 1
    except psycopg.OperationalError as error:
        sys.stderr.write(f"memwarden migrate: cannot reach the database {params.dbname!r}: {error}\n")
        return 1
    finally:
        if server is not None:
            server.stop()
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        sys.stdout.write(describe(report) + "\n")
    return 0


def describe(report: MigrationReport) -> str:
    adopted = " (made before migrations: its tables were kept and recorded as the baseline)"
    lines = [f"database {report.database}{adopted if report.baseline else ''}"]
    lines += [f"applied {label}" for label in report.applied]
    if not report.applied:
        lines.append("nothing to apply")
    lines.append(f"at migration {report.version:04d}")
    return "\n".join(lines)


def check_configured_database(settings: Settings) -> None:
    """Before a server starts on ``DATABASE_URL``: refuse (``SchemaNotMigrated``) a database
    that lacks migrations. The embedded default migrates itself when it opens."""
    from memwarden.bootstrap.migrate import require_migrated  # noqa: PLC0415 - see api/cli/main.py
    from memwarden.domain.ledger.database import ConnectionParams  # noqa: PLC0415

    if settings.database_url:
        require_migrated(ConnectionParams.from_url(settings.database_url))


def register(sub: Any) -> None:
    migrate_parser = sub.add_parser(
        "migrate",
        help="apply the pending schema migrations (DATABASE_URL, or the embedded default)",
        description=__doc__,
    )
    migrate_parser.add_argument("--json", action="store_true", help="print the report as JSON")
    migrate_parser.set_defaults(handler=cmd_migrate)
