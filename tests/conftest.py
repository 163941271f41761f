"""Shared fixtures: a real PostgreSQL with pgvector (embedded, or DATABASE_URL) and Redis.

Every test that touches the database gets a fresh database of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bootstrap.migrate import migrate
from domain.ledger.database import ConnectionParams, EmbeddedServer
from domain.services.core import Core
from domain.settings import Settings


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectionParams]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield ConnectionParams.from_url(url)
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("embedded"))
    params = ConnectionParams.from_url(server.start())
    yield params
    server.stop()


@pytest.fixture
def database(pg_server: ConnectionParams) -> Iterator[ConnectionParams]:
    name = f"mw_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate(pg_server.with_dbname(name))
    try:
        yield pg_server.with_dbname(name)
    finally:
        with psycopg.connect(pg_server.conninfo(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def url_of(params: ConnectionParams) -> str:
    return (
        f"postgresql://{params.user}:{params.password}@/{params.dbname}?host={params.host}&port={params.port}"
    )


@pytest.fixture
def settings(tmp_path: Path, database: ConnectionParams) -> Settings:
    return Settings(data_dir=tmp_path / "data", database_url=url_of(database), pool_size=4)


@pytest.fixture
def core(settings: Settings) -> Iterator[Core]:
    with Core(settings) as opened:
        yield opened
