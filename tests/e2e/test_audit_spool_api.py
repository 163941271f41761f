"""Reads on a database that takes no writes: served while their records can wait in the
audit spool, refused (503) once they cannot; every served read reaches the ledger later."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import msgspec
import pytest
from eventsourcing.persistence import OperationalError
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.e2e.fleet import read_only
from tests.processes import wait_until

FACT = "The staging cluster rebuilds every Sunday night"


@contextlib.contextmanager
def _api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def _reads_on_record(api: Api, actor: str) -> int:
    """-1 while the pool is still replacing the connections the database cut."""
    try:
        return _count_reads(api, actor)
    except OperationalError:
        return -1


def _count_reads(api: Api, actor: str) -> int:
    records, after = 0, 0
    while batch := api.runtime.ledger.read(after, 5000):
        records += sum(
            isinstance(r.event, AuditRecorded) and r.event.actor == actor and r.event.op == "read"
            for r in batch
        )
        after = int(batch[-1].position or 0)
    return records


def _written(api: Api, key: str) -> str:
    written = api.mem(key, "write", {"content": FACT})
    assert written.status_code == 200, written.text
    api.settle()
    return str(written.json()["id"])


def _read_status(api: Api, key: str, memory_id: str) -> int:
    return int(api.mem(key, "read", {"id": memory_id}).status_code)


@pytest.mark.slow
def test_reads_are_served_while_their_records_can_wait_and_reach_the_ledger_after(
    settings: Settings, database: ConnectionParams
) -> None:
    with _api(settings) as api:
        key = api.key("acme/eng", "bot", "agent")
        memory_id = _written(api, key)
        with read_only(database):
            wait_until(lambda: _read_status(api, key, memory_id) == 200, 30)  # the pool reconnects
            assert [_read_status(api, key, memory_id) for _ in range(5)] == [200] * 5
            spool = api.runtime.ledger.audit_spool
            assert spool is not None
            assert spool.kept >= 6
            reads_so_far = spool.kept
        wait_until(lambda: _reads_on_record(api, "bot") >= reads_so_far, 30)


@pytest.mark.slow
def test_a_read_whose_record_can_neither_be_appended_nor_spooled_is_refused(
    settings: Settings, database: ConnectionParams
) -> None:
    tiny = msgspec.structs.replace(settings, audit_spool_max_bytes=1)  # nothing fits
    with _api(tiny) as api:
        key = api.key("acme/eng", "bot", "agent")
        memory_id = _written(api, key)
        with read_only(database):
            wait_until(lambda: _read_status(api, key, memory_id) == 503, 30)
            refused = api.mem(key, "read", {"id": memory_id})
            assert (refused.status_code, refused.json()["error"]) == (503, "unavailable")
            assert FACT not in refused.text  # no answer goes out off the record
            assert refused.headers.get("retry-after") is not None
        wait_until(lambda: _read_status(api, key, memory_id) == 200, 30)
