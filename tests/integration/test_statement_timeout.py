"""The service's pooled connections carry PostgreSQL's statement_timeout: a runaway statement
is cancelled by the server and its connection freed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psycopg
import pytest

from memwarden.bootstrap.core import open_core
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import Settings
from tests.conftest import url_of


def test_a_statement_longer_than_the_timeout_is_cancelled(tmp_path: Path, database: ConnectionParams) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", database_url=url_of(database), pool_size=2, statement_timeout_seconds=0.5
    )
    with open_core(settings) as core, core.ledger.datastore.get_connection() as conn:
        shown = conn.execute("SHOW statement_timeout").fetchone()
        assert shown is not None
        assert next(iter(shown.values())) == "500ms"
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(3)")


def test_every_connection_the_pool_opens_carries_the_timeout(
    tmp_path: Path, database: ConnectionParams
) -> None:
    """All of the pool's connections held at once, the ones it opened first and its overflow
    alike: none was opened before the setting was in place."""
    settings = Settings(
        data_dir=tmp_path / "data", database_url=url_of(database), pool_size=2, statement_timeout_seconds=0.25
    )
    with open_core(settings) as core, contextlib.ExitStack() as held:
        pool = core.ledger.datastore.pool
        connections = [
            held.enter_context(core.ledger.datastore.get_connection()) for _ in range(pool.max_size)
        ]
        shown = {
            next(iter(row.values()))
            for c in connections
            if (row := c.execute("SHOW statement_timeout").fetchone())
        }
        assert len({id(c) for c in connections}) == pool.max_size
        assert shown == {"250ms"}
