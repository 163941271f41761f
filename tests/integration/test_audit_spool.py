"""The audit spool on a real ledger: records the ledger could not take are kept on disk,
appended once it can, never twice, and left by a dead process for the next to append."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import msgspec
import psycopg
import pytest

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.app import StreamConflict
from memwarden.domain.ledger.audit_spool import AuditSpool, SpoolFull
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.audit import audit_record
from memwarden.domain.settings import Settings
from tests.processes import wait_until

AGENT = Identity("acme/eng", "bot", "agent")
AT = datetime(2026, 12, 2, 9, 30, tzinfo=UTC)


def _record(detail: str) -> AuditRecorded:
    return audit_record(uuid4(), AGENT, "read", "ok", detail, AT)


def _audit_records(core: Core) -> list[AuditRecorded]:
    events = []
    after = 0
    while batch := core.ledger.read(after, 5000):
        events.extend(r.event for r in batch if isinstance(r.event, AuditRecorded))
        after = int(batch[-1].position or 0)
    return events


def _on_ledger(error: Exception) -> bool:
    return isinstance(error, StreamConflict)


def _spool(core: Core, directory: Path, max_bytes: int = 1 << 20) -> AuditSpool:
    return AuditSpool(directory, core.ledger.append_spooled, _on_ledger, max_bytes, 0.05)


def _refusing(_record: AuditRecorded) -> None:
    raise psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")


def test_kept_records_reach_the_ledger_once_with_their_ids_and_times(settings: Settings) -> None:
    with open_core(settings, embedder=None) as core:
        spool = _spool(core, settings.data_dir / "spool")
        kept = [_record(f"read {n}") for n in range(3)]
        for record in kept:
            spool.keep(record)
        wait_until(lambda: len(_audit_records(core)) == 3, 10)
        assert spool.drain()  # nothing left: a second drain appends nothing again
        on_ledger = _audit_records(core)
        assert [r.record_id for r in on_ledger] == [r.record_id for r in kept]
        assert {r.at for r in on_ledger} == {AT}
        assert spool.path.stat().st_size == 0
        spool.close()
        assert not spool.path.exists()


def test_records_wait_while_the_ledger_refuses_and_go_in_after(settings: Settings) -> None:
    with open_core(settings, embedder=None) as core:
        spool = AuditSpool(settings.data_dir / "spool", _refusing, _on_ledger, 1 << 20, 3600)
        spool.keep(_record("while read only"))
        assert not spool.drain()
        assert spool.path.stat().st_size > 0
        spool.append = core.ledger.append_spooled
        assert spool.drain()
        assert [r.detail for r in _audit_records(core)] == ["while read only"]
        spool.close()


def test_a_record_already_on_the_ledger_is_not_appended_again(settings: Settings) -> None:
    """A crash between the append and the truncation: the next drain meets the record's id."""
    with open_core(settings, embedder=None) as core:
        record = _record("appended, then the process died")
        core.ledger.append_spooled(record)
        orphan = settings.data_dir / "spool" / f"{uuid4()}.jsonl"
        orphan.parent.mkdir(parents=True)
        orphan.write_bytes(
            msgspec.json.encode(record) + b"\n" + msgspec.json.encode(_record("not yet")) + b"\n"
        )
        spool = _spool(core, orphan.parent)
        assert spool.drain()
        assert [r.detail for r in _audit_records(core)] == ["appended, then the process died", "not yet"]
        assert not orphan.exists()


def test_a_torn_last_line_is_dropped_and_the_rest_appended(settings: Settings) -> None:
    with open_core(settings, embedder=None) as core:
        orphan = settings.data_dir / "spool" / f"{uuid4()}.jsonl"
        orphan.parent.mkdir(parents=True)
        whole = msgspec.json.encode(_record("whole")) + b"\n"
        orphan.write_bytes(whole + msgspec.json.encode(_record("torn"))[:40])
        assert _spool(core, orphan.parent).drain()
        assert [r.detail for r in _audit_records(core)] == ["whole"]


def test_a_full_spool_refuses_to_keep(settings: Settings) -> None:
    with open_core(settings, embedder=None) as core:
        one_line = len(msgspec.json.encode(_record("fits"))) + 1
        spool = AuditSpool(settings.data_dir / "spool", _refusing, _on_ledger, 2 * one_line, 3600)
        spool.keep(_record("fits"))
        spool.keep(_record("fits"))
        with pytest.raises(SpoolFull):
            spool.keep(_record("fits"))
        spool.append = core.ledger.append_spooled
        assert spool.drain()
        assert len(_audit_records(core)) == spool.kept == 2
        spool.close()


def test_a_live_process_s_file_is_left_to_it(settings: Settings) -> None:
    with open_core(settings, embedder=None) as core:
        directory = settings.data_dir / "spool"
        owner = AuditSpool(directory, _refusing, _on_ledger, 1 << 20, 3600)
        owner.keep(_record("the owner's"))
        assert _spool(core, directory).drain()  # the other spool skips the held file
        assert _audit_records(core) == []
        owner.append = core.ledger.append_spooled
        assert owner.drain()
        assert [r.detail for r in _audit_records(core)] == ["the owner's"]
        owner.close()


KEEP_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from datetime import UTC, datetime
    from pathlib import Path
    from uuid import UUID
    from memwarden.domain.ledger.audit_spool import AuditSpool
    from memwarden.domain.model.identity import Identity
    from memwarden.domain.services.audit import audit_record

    def refuse(record):
        raise OSError("the ledger takes no writes")

    spool = AuditSpool(Path(sys.argv[1]), refuse, lambda e: False, 1 << 20, 3600)
    for n, record_id in enumerate(sys.argv[2:]):
        spool.keep(audit_record(UUID(record_id), Identity("acme/eng", "bot", "agent"), "read", "ok",
                                f"kept by a process that died {n}", datetime(2026, 12, 2, tzinfo=UTC)))
    print("kept", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_dead_process_s_records_are_appended_by_the_next_core(settings: Settings) -> None:
    ids = [uuid4() for _ in range(3)]
    directory = settings.data_dir / "audit-spool"  # the core's own spool directory
    died = subprocess.run(
        [sys.executable, "-c", KEEP_AND_DIE, str(directory), *map(str, ids)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        check=False,
    )
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert died.stdout.strip() == "kept"
    assert [p.stat().st_size > 0 for p in directory.glob("*.jsonl")] == [True]
    with open_core(settings, embedder=None) as core:  # it drains what the dead process left
        wait_until(lambda: [r.record_id for r in _audit_records(core)] == ids, 15)
        wait_until(lambda: not list(directory.glob("*.jsonl")), 15)


def test_drains_take_turns_so_each_record_is_appended_once(tmp_path: Path) -> None:
    # The background drain and a caller's may start together. One that overtook the other
    # emptied the file under it: the first then answered "something left", and would have
    # emptied, unappended, records of the same length kept after the overtaking.
    appended: list[AuditRecorded] = []
    others: list[bool] = []
    spool: AuditSpool

    def append(record: AuditRecorded) -> None:
        appended.append(record)
        if len(appended) == 1:  # while this drain appends, another one starts
            other = threading.Thread(target=lambda: others.append(spool.drain()))
            other.start()
            other.join(0.3)
            assert other.is_alive(), "the other drain waits for this one to end"
            waiting.append(other)

    waiting: list[threading.Thread] = []
    spool = AuditSpool(tmp_path / "spool", append, _on_ledger, 1 << 20, 3600)
    kept = [_record(f"read {n}") for n in range(3)]
    for record in kept:
        spool.keep(record)
    assert spool.drain()
    waiting[0].join(5)
    assert others == [True]  # it found nothing left
    assert appended == kept  # each once, in order
    assert spool.path.stat().st_size == 0
    spool.close()
