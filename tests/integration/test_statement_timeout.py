"""The service's pooled connections carry PostgreSQL's statement_timeout: a runaway statement
is cancelled by the server and its connection freed."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.services.core import Core
from memwarden.domain.settings import Settings
from tests.conftest import url_of


def test_a_statement_longer_than_the_timeout_is_cancelled(tmp_path: Path, database: ConnectionParams) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", database_url=url_of(database), pool_size=2, statement_timeout_seconds=0.5
    )
    with Core(settings) as core, core.ledger.datastore.get_connection() as conn:
        shown = conn.execute("SHOW statement_timeout").fetchone()
        assert shown is not None
        assert next(iter(shown.values())) == "500ms"
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(3)")
