"""Fixtures of the HTTP tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from api.http.app import create_app
from bootstrap.runtime import Runtime
from domain.ledger.database import ConnectionParams
from domain.settings import Settings
from tests.conftest import url_of
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
