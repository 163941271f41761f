"""Shared fixtures: a real PostgreSQL with pgvector (embedded, or DATABASE_URL) and Redis.

Every test that touches the database gets a fresh database of its own, a copy of a template
whose schema is made once per session (``prepare_template``). Every test embeds with the
hash embedder (fast, no meaning) unless it is marked ``minilm``: the tests about the bundled
model or about retrieval by meaning.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
import psycopg
import pytest
from psycopg import sql

from memwarden.bootstrap.core import Core, open_core
from memwarden.bootstrap.migrate import migrate
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer
from memwarden.domain.settings import Settings
from tests.processes import METRICS_TOKEN, free_port, start_redis

os.environ["MEMWARDEN_METRICS_TOKEN"] = METRICS_TOKEN  # every `memwarden` process a test starts
os.environ.pop("REDIS_URL", None)  # a process a test starts uses Redis only when the test says so


@pytest.fixture(autouse=True)
def _embedder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """``MEMWARDEN_EMBEDDER`` of the test and of the processes it starts (they inherit the
    environment): ``minilm`` for a test marked ``minilm``, else ``hash``; no reranker."""
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", embedder_of(request))
    # Rankings in tests are the lanes' own; the reranking stage is tested with its drivers
    # built explicitly (tests/integration/test_search_rerank.py).
    monkeypatch.setenv("MEMWARDEN_RERANK", "none")


def embedder_of(request: pytest.FixtureRequest) -> str:
    """``minilm`` for a test marked ``minilm``, else ``hash``."""
    return "minilm" if request.node.get_closest_marker("minilm") else "hash"


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail each test of a ``--dist loadgroup`` run whose ``xdist_group`` is ignored.

    pytest-xdist keeps a group on one worker by renaming each of its tests ``<id>@<group>``.
    A pytest that keeps node ids elsewhere (9.2, beside pytest-xdist 3.8) drops the new name
    without a word, and the timed tests would overlap each other."""
    if getattr(item.config.option, "loadgroup", False) and not item.nodeid.endswith(_group_suffix(item)):
        pytest.fail("--dist loadgroup ignores this test's xdist_group: pytest-xdist and pytest disagree")


def _group_suffix(item: pytest.Item) -> str:
    """What pytest-xdist appends to the id of a test in an ``xdist_group`` ("" for no group)."""
    names = {
        str(m.args[0] if m.args else m.kwargs.get("name", "default"))
        for m in item.iter_markers("xdist_group")
    }
    return f"@{'_'.join(sorted(names))}" if names else ""


def url_of(params: ConnectionParams) -> str:
    return (
        f"postgresql://{params.user}:{params.password}@/{params.dbname}?host={params.host}&port={params.port}"
    )


def _quick_commits(params: ConnectionParams) -> None:
    """The session's own embedded server does not flush to disk at each commit: a killed
    server process loses nothing (the writes are in the OS cache); only a crash of the
    machine would, and the server is thrown away with the session anyway."""
    with psycopg.connect(params.conninfo(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectionParams]:
    url = os.environ.get("DATABASE_URL")
    if url:
        yield ConnectionParams.from_url(url)
        return
    server = EmbeddedServer(tmp_path_factory.mktemp("embedded"))
    params = ConnectionParams.from_url(server.start())
    _quick_commits(params)
    yield params
    server.stop()


def prepare_template(params: ConnectionParams) -> None:
    """Give the empty database ``params`` the schema every test database starts with: the
    numbered migrations, the one place the schema is made (no key material: each test's
    runtime makes its own from its own key files)."""
    migrate(params)


def _create_database(server: ConnectionParams, name: str, template: str | None = None) -> None:
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement = sql.SQL("{} TEMPLATE {}").format(statement, sql.Identifier(template))
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(statement)


def _drop_database(server: ConnectionParams, name: str) -> None:
    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def template_database(pg_server: ConnectionParams) -> Iterator[str]:
    """The name of the session's template database (nobody connects to it after it is made,
    so ``CREATE DATABASE … TEMPLATE`` can copy it)."""
    name = f"mw_template_{uuid.uuid4().hex[:12]}"
    _create_database(pg_server, name)
    try:
        prepare_template(pg_server.with_dbname(name))
        yield name
    finally:
        _drop_database(pg_server, name)


@pytest.fixture
def empty_database(pg_server: ConnectionParams) -> Iterator[ConnectionParams]:
    """A fresh database without any table, for the tests of making the schema."""
    name = f"mw_test_{uuid.uuid4().hex[:12]}"
    _create_database(pg_server, name)
    try:
        yield pg_server.with_dbname(name)
    finally:
        _drop_database(pg_server, name)


@contextmanager
def copy_of_template(server: ConnectionParams, template: str) -> Iterator[ConnectionParams]:
    """A new database made from ``template``, dropped on the way out."""
    name = f"mw_test_{uuid.uuid4().hex[:12]}"
    _create_database(server, name, template)
    try:
        yield server.with_dbname(name)
    finally:
        _drop_database(server, name)


@pytest.fixture
def database(pg_server: ConnectionParams, template_database: str) -> Iterator[ConnectionParams]:
    """A fresh database of the test's own, with the schema of the template."""
    with copy_of_template(pg_server, template_database) as params:
        yield params


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of the session's own (each pytest-xdist worker starts one): the tests
    never use a Redis they did not start. Deployments (test databases) sharing it keep
    apart by their key prefix (``deployment_key``)."""
    port = free_port()
    server = start_redis(port, tmp_path_factory.mktemp("redis") / "redis.log")
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture
def settings(request: pytest.FixtureRequest, tmp_path: Path, database: ConnectionParams) -> Settings:
    """A deployment on the test's database; no ``REDIS_URL``, as by default (a module whose
    tests run workers on Redis overrides this fixture with ``on_redis``). Its models are the
    ones ``_embedder`` gives the processes a test starts: the hash embedder (MiniLM for a
    test marked ``minilm``), no reranker."""
    return Settings(
        data_dir=tmp_path / "data",
        database_url=url_of(database),
        pool_size=4,
        metrics_token=METRICS_TOKEN,
        embedder=embedder_of(request),
        rerank="none",
    )


def on_redis(settings: Settings, redis_url: str) -> Settings:
    """``settings`` with the session's Redis as ``REDIS_URL``: passes go to workers."""
    return msgspec.structs.replace(settings, redis_url=redis_url)


@pytest.fixture
def core(settings: Settings) -> Iterator[Core]:
    with open_core(settings) as opened:
        yield opened
