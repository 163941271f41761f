"""Fixtures of the HTTP tests."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import Settings
from tests.conftest import copy_of_template, url_of
from tests.e2e.api_helpers import Api
from tests.processes import cli_key, serving


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


@pytest.fixture
def env(database: ConnectionParams, tmp_path: Path) -> dict[str, str]:
    """The environment of a `memwarden` process on the test database (its embedder: the
    test's, ``hash`` unless the test is marked ``minilm``)."""
    return {**os.environ, "DATABASE_URL": url_of(database), "MEMWARDEN_DATA_DIR": str(tmp_path / "home")}


@pytest.fixture
def served(env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """A real `memwarden serve` on a free loopback port, and an agent key of acme/eng."""
    key = cli_key(env, "acme/eng", "bot", "agent")
    with serving(env) as (server, base):
        yield server, base, key


@pytest.fixture(scope="module")
def module_env(
    pg_server: ConnectionParams, template_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """The environment of `memwarden` processes shared by the tests of one module: one
    database, the hash embedder; each test works in a tenant of its own (``tenant``)."""
    with copy_of_template(pg_server, template_database) as database:
        yield {
            **os.environ,
            "DATABASE_URL": url_of(database),
            "MEMWARDEN_DATA_DIR": str(tmp_path_factory.mktemp("home")),
            "MEMWARDEN_EMBEDDER": "hash",
            "MEMWARDEN_RERANK": "none",
        }


@pytest.fixture(scope="module")
def module_server(module_env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """One real `memwarden serve` for the tests of a module (starting one is seconds)."""
    with serving(module_env) as (server, base):
        yield server, base


@pytest.fixture
def tenant() -> str:
    """A tenant no other test uses, for tests that share a server."""
    return f"t{uuid.uuid4().hex[:12]}"
