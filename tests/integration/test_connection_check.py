"""The pool's check of a connection before it is handed out (``ConnectionCheck``): a
connection in steady use goes out without a round trip, and one whose backend is gone, or
that was idle long, is pinged, so that a dead one is never handed out."""

from __future__ import annotations

import socket
import time
from typing import Any, cast

import psycopg
import pytest
from eventsourcing.postgres import PostgresDatastore
from psycopg_pool import ConnectionPool

from memwarden.bootstrap.core import Core
from memwarden.domain.ledger.database import ConnectionCheck


def check_of(datastore: PostgresDatastore) -> ConnectionCheck:
    check = cast(Any, datastore.pool)._check
    assert isinstance(check, ConnectionCheck)
    return check


def backend_pid(datastore: PostgresDatastore) -> int:
    with datastore.get_connection() as conn:
        row = conn.execute("SELECT pg_backend_pid() AS pid").fetchone()
        assert row is not None
        return int(row["pid"])


def test_a_connection_in_steady_use_is_handed_out_without_a_round_trip(core: Core) -> None:
    datastore = core.ledger.datastore
    check = check_of(datastore)
    pool = cast(Any, datastore.pool)
    pool.wait(timeout=30)  # the pool opens its connections in the background: all of them open
    for _ in range(pool.get_stats()["pool_size"]):  # each handed out once (pinged: never seen)
        backend_pid(datastore)
    pings = check.pings
    for _ in range(20):
        backend_pid(datastore)
    assert check.pings == pings


def test_a_connection_whose_backend_was_terminated_is_never_handed_out(core: Core) -> None:
    datastore = core.ledger.datastore
    check = check_of(datastore)
    pids = [backend_pid(datastore) for _ in range(6)]
    gone = pids[-1]
    with psycopg.connect(
        datastore.pool.conninfo, **cast(Any, datastore.pool.kwargs), autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (gone,))
    time.sleep(0.2)  # the server closes its socket
    pings = check.pings
    assert gone not in [backend_pid(datastore) for _ in range(12)]
    # the dead one was pinged (and dropped), and at most the new connection that replaced it,
    # on its first hand-out: none of the five in steady use
    assert pings + 1 <= check.pings <= pings + 2


class FakeConnection:
    """A connection's socket (one end of a socket pair), nothing more."""

    closed = False

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()


def test_a_connection_idle_long_or_with_something_to_read_is_pinged(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    pinged: list[float] = []
    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(lambda _conn: pinged.append(now[0])))
    check = ConnectionCheck(idle_seconds=5.0, clock=lambda: now[0])
    ours, servers = socket.socketpair()
    with ours, servers:
        conn = cast(Any, FakeConnection(ours))
        check(conn)  # never handed out before
        now[0] = 4.0
        check(conn)  # in steady use: no round trip
        assert pinged == [0.0]
        now[0] = 9.5
        check(conn)  # idle longer than 5 s
        assert pinged == [0.0, 9.5]
        servers.sendall(b"E")  # the server said something (its last word, before it closed)
        now[0] = 10.0
        check(conn)
        assert pinged == [0.0, 9.5, 10.0]
        servers.close()
        ours.recv(1)
        now[0] = 10.5
        check(conn)  # closed by the server: readable (end of file)
        assert pinged == [0.0, 9.5, 10.0, 10.5]
