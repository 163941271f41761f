"""A ledger chain per tenant (``MEMWARDEN_LEDGER_CHAINS=tenant``, deploy/SCALE.md §3).

Real PostgreSQL throughout: appends of one tenant lock only its head row, a second
transaction gives them their global positions, and everything that follows the global
order (projections, read-your-writes, ``ledger verify``) works as on the single chain.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import msgspec
import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.api.http.routes.compliance import public_problem
from memwarden.bootstrap.core import Core, open_core
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.chain import canonical, link, tenant_genesis
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.ledger.recorder import AppendGroup
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.audit import audit_record
from memwarden.domain.settings import SCHEMA, Settings

ACME = Identity("acme/eng", "agent-1", "agent")
ACME_ADMIN = Identity("acme/eng", "olga", "admin")
GLOBEX = Identity("globex/ops", "agent-2", "agent")
EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
FACTS = (
    "Deploys need two approvals",
    "The billing export lands in the finance bucket",
    "Search indexes are rebuilt every night",
    "Incident reviews happen on Thursdays",
    "Laptops are encrypted with the corporate key",
)


def tenant_mode(settings: Settings) -> Settings:
    return msgspec.structs.replace(settings, ledger_chains="tenant")


@pytest.fixture
def tenant_settings(settings: Settings) -> Settings:
    return tenant_mode(settings)


@pytest.fixture
def runtime(tenant_settings: Settings) -> Iterator[Runtime]:
    with Runtime(tenant_settings, follow=True) as rt:
        yield rt


def events_of(conninfo: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(conninfo) as conn:
        return conn.execute(
            SQL(
                "SELECT notification_id, tenant, tenant_position, originator_id, originator_version, topic, state"
                " FROM {} ORDER BY notification_id NULLS LAST, tenant, tenant_position"
            ).format(EVENTS)
        ).fetchall()


def in_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    return thread, out


def test_writes_of_two_tenants_project_and_read_back(runtime: Runtime) -> None:
    written = []
    for n in range(len(FACTS)):
        for who in (ACME, GLOBEX):
            result = runtime.memory.write(who, WriteMemory(content=f"{who.namespace}: {FACTS[n]}"))
            assert result.outcome == "stored"
            written.append((who, result))
    for who, result in written:
        assert result.id is not None
        assert result.position is not None
        view = runtime.reads.read(who, result.id, after=result.position)
        assert view is not None
        assert view.content.startswith(who.namespace)
        assert (
            runtime.reads.read(GLOBEX if who is ACME else ACME, result.id) is None
        )  # other tenant: invisible
    rows = events_of(runtime.core.params.conninfo())
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "global positions are gapless"
    positions = [result.position for _, result in written]
    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions)
    by_tenant: dict[str, list[int]] = {}
    for _, tenant, tenant_position, *_rest in rows:
        by_tenant.setdefault(tenant, []).append(tenant_position)
    assert set(by_tenant) == {"acme", "globex"}
    assert all(ps == list(range(1, len(ps) + 1)) for ps in by_tenant.values()), "tenant positions are gapless"
    report = runtime.ledger.verify()
    assert report.ok, report
    assert (report.tenant_chains, report.tenant_events, report.checked) == (2, len(rows), len(rows))


def test_the_tenant_chain_is_the_documented_formula(runtime: Runtime) -> None:
    """Each tenant's chain: genesis sha256('memwarden chain' || tenant), then the global
    formula over tenant positions; its head row holds the last link."""
    for n in range(3):
        runtime.memory.write(ACME, WriteMemory(content=FACTS[n]))
    rows = [r for r in events_of(runtime.core.params.conninfo()) if r[1] == "acme"]
    previous = tenant_genesis("acme")
    expected = []
    for _, _, tenant_position, originator_id, version, topic, state in sorted(rows, key=lambda r: r[2]):
        previous = link(previous, canonical(tenant_position, originator_id, version, topic, bytes(state)))
        expected.append((tenant_position, previous))
    with psycopg.connect(runtime.core.params.conninfo()) as conn:
        chain = conn.execute(
            "SELECT position, hash FROM memwarden.tenant_chain WHERE tenant = 'acme' ORDER BY position"
        ).fetchall()
        head = conn.execute(
            "SELECT position, hash FROM memwarden.tenant_heads WHERE tenant = 'acme'"
        ).fetchone()
    assert [(p, bytes(h)) for p, h in chain] == expected
    assert head is not None
    assert (head[0], bytes(head[1])) == expected[-1]


def test_a_tenants_append_never_waits_on_another_tenants_lock(core: Core, settings: Settings) -> None:
    """globex appends while a transaction holds acme's head row; acme's own append waits
    for it (so the lock is real), and goes through once it is released."""
    with open_core(tenant_mode(settings)) as tenants:
        for who in (ACME, GLOBEX):
            tenants.memory.write(who, WriteMemory(content=f"{who.namespace} keeps its runbooks in git"))
        with psycopg.connect(tenants.params.conninfo()) as holder:
            holder.execute("SELECT * FROM memwarden.tenant_heads WHERE tenant = 'acme' FOR UPDATE")
            other, other_out = in_thread(
                lambda: tenants.memory.write(GLOBEX, WriteMemory(content="Globex pages the on-call by SMS"))
            )
            other.join(timeout=10)
            assert not other.is_alive(), "globex waited on acme's head row"
            assert other_out[0].outcome == "stored"  # type: ignore[attr-defined]
            same, same_out = in_thread(
                lambda: tenants.memory.write(ACME, WriteMemory(content="Acme pages the on-call by phone"))
            )
            same.join(timeout=1.5)
            assert same.is_alive(), "acme's append did not wait on its own head row"
            holder.rollback()
        same.join(timeout=10)
        assert not same.is_alive()
        assert same_out[0].outcome == "stored"  # type: ignore[attr-defined]
        assert tenants.ledger.verify().ok


def test_the_single_chain_makes_every_tenant_wait(core: Core) -> None:
    """The reference the test above is measured against: with one chain, a held append
    lock stops every tenant's appends."""
    core.memory.write(GLOBEX, WriteMemory(content="Globex keeps its runbooks in git"))
    with psycopg.connect(core.params.conninfo()) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('memwarden ledger sequence'))")
        other, out = in_thread(lambda: core.memory.write(GLOBEX, WriteMemory(content="Globex pages by SMS")))
        other.join(timeout=1.5)
        assert other.is_alive(), "a single-chain append did not wait on the ledger's lock"
        holder.rollback()
    other.join(timeout=10)
    assert not other.is_alive()
    assert out[0].outcome == "stored"


def leave_pending(core: Core, tenant: str, namespace: str) -> UUID:
    """What a process killed between its two transactions leaves: an audit record committed
    on its tenant's chain, never sequenced."""
    record = audit_record(
        uuid4(), Identity(namespace, "agent-9", "agent"), "write", "ok", "left behind", datetime.now(UTC)
    )
    stored = core.ledger.sealing.encode(Recorded(record.record_id, 1, record), {})
    refused = core.ledger.recorder.append_tenant_groups([AppendGroup(events=[stored], tenant=tenant)])
    assert refused == set()
    return record.record_id


def audited_position(conninfo: str, record_id: UUID) -> int | None:
    with psycopg.connect(conninfo) as conn:
        row = conn.execute(
            "SELECT position FROM memwarden.audit_records WHERE record_id = %s", (record_id,)
        ).fetchone()
    return None if row is None else int(row[0])


def wait_until(check: Callable[[], object], seconds: float) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    return check()


def test_a_row_left_pending_is_sequenced_by_the_ledger_and_projected(tenant_settings: Settings) -> None:
    with Runtime(tenant_settings, follow=False) as rt:
        rt.memory.write(ACME, WriteMemory(content="Acme deploys on Tuesdays"))
        at_start = leave_pending(rt.core, "acme", "acme/eng")
        assert rt.ledger.oldest_pending() is not None
    conninfo = ""
    with Runtime(tenant_settings, follow=True) as rt:  # start-up sequences what it finds pending
        conninfo = rt.core.params.conninfo()
        assert wait_until(lambda: audited_position(conninfo, at_start), 10), "not projected after start-up"
        in_loop = leave_pending(rt.core, "globex", "globex/ops")  # the running loop's turn
        position = wait_until(lambda: audited_position(conninfo, in_loop), 15)
        assert position, "the runner left a committed event unsequenced"
        assert rt.ledger.oldest_pending() is None
        report = rt.ledger.verify()
        assert report.ok, report
    rows = events_of(conninfo)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))


def test_the_ledger_sequences_a_row_left_pending_without_any_read_side(tenant_settings: Settings) -> None:
    """The ledger's own sequencer, not a projection runner, keeps the notification log whole:
    a core that follows nothing sequences what a dead appender left, after a second look."""
    with open_core(tenant_settings) as core:
        left = leave_pending(core, "acme", "acme/eng")
        assert core.ledger.oldest_pending() is not None
        assert wait_until(lambda: core.ledger.oldest_pending() is None, 10), "left pending"
        (position,) = [r.position for r in core.ledger.read(0, 1000) if r.originator_id == left]
        assert position is not None
        assert core.ledger.verify().ok


def test_the_positions_an_append_answers_are_durable(tenant_settings: Settings) -> None:
    """The sequencing commits without waiting for a flush (it holds the sequence lock), so the
    append flushes the WAL after it: when a write returns, nothing it wrote is still unflushed.
    A flush that never happened (an empty transaction's commit does not wait) fails this every
    time; the margin is for WAL a background process may write in between."""
    flushed = 0
    with (
        open_core(tenant_settings) as core,
        psycopg.connect(core.params.conninfo(), autocommit=True) as probe,
    ):
        for n in range(20):
            core.memory.write(ACME, WriteMemory(content=f"{FACTS[n % len(FACTS)]} ({n})"))
            row = probe.execute("SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn()").fetchone()
            flushed += bool(row and row[0])
        assert core.ledger.oldest_pending() is None
    assert flushed >= 17, f"only {flushed} of 20 writes were flushed when they returned"


def test_single_chain_and_tenant_chain_processes_share_one_database(core: Core, settings: Settings) -> None:
    """Appends of both modes at once never hand out one position twice nor leave a gap, and
    both the global chain and the tenant chains verify."""
    with open_core(tenant_mode(settings)) as tenants:
        errors: list[BaseException] = []

        def writer(target: Core, who: Identity, label: str) -> None:
            try:
                for n in range(15):
                    target.memory.write(who, WriteMemory(content=f"{label}: {FACTS[n % len(FACTS)]} ({n})"))
            except BaseException as error:
                errors.append(error)

        threads = [
            threading.Thread(target=writer, args=(target, who, f"{mode}{i}"))
            for mode, target in (("single", core), ("tenant", tenants))
            for i, who in enumerate((ACME, GLOBEX, ACME))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        rows = events_of(core.params.conninfo())
        assert [r[0] for r in rows] == list(range(1, len(rows) + 1)), "a position was duplicated or skipped"
        assert sum(1 for r in rows if r[1] is None) > 0
        assert sum(1 for r in rows if r[1] is not None) > 0
        for ledger in (core.ledger, tenants.ledger):
            report = ledger.verify()
            assert report.ok, report
            assert report.checked == len(rows)
            assert report.tenant_chains == 2


def test_erasure_on_a_tenant_chain_destroys_the_key_in_the_same_append(runtime: Runtime) -> None:
    kept = runtime.memory.write(ACME, WriteMemory(content="Dana's badge number is 4417"))
    gone = runtime.memory.write(ACME, WriteMemory(content="Dana's locker code is 9921"))
    assert kept.id is not None
    assert gone.id is not None
    result = runtime.core.erasure.forget(ACME_ADMIN, Forget(ids=(gone.id,), reason="data subject request"))
    assert result.erased == 1
    with psycopg.connect(runtime.core.params.conninfo()) as conn:
        keys = {r[0] for r in conn.execute("SELECT memory_id FROM memwarden.data_keys")}
        erased = conn.execute(
            "SELECT tenant, notification_id FROM memwarden.events WHERE originator_id = %s AND topic = 'MemoryErased'",
            (gone.id,),
        ).fetchall()
    assert gone.id not in keys
    assert kept.id in keys
    assert len(erased) == 1
    assert erased[0][0] == "acme"
    assert erased[0][1] is not None
    runtime.reads.wait_for(runtime.ledger.head_position())
    tombstone = runtime.reads.read(ACME_ADMIN, gone.id)
    assert tombstone is not None
    assert (tombstone.status, tombstone.content) == ("erased", None)
    still = runtime.reads.read(ACME_ADMIN, kept.id)
    assert still is not None
    assert still.content == "Dana's badge number is 4417"
    report = runtime.ledger.verify()
    assert report.ok, report


def test_a_broken_tenant_chain_fails_verify_and_http_does_not_name_the_tenant(runtime: Runtime) -> None:
    for who in (ACME, GLOBEX):
        runtime.memory.write(who, WriteMemory(content=f"{who.namespace}: {FACTS[0]}"))
    with psycopg.connect(runtime.core.params.conninfo()) as conn:
        conn.execute(
            "UPDATE memwarden.tenant_chain SET hash = %s WHERE tenant = 'globex' AND position = 1",
            (bytes(32),),
        )
    report = runtime.ledger.verify()
    assert not report.ok
    assert report.first_bad_position is None  # the single chain still holds
    assert (report.first_bad_tenant, report.first_bad_tenant_position) == ("globex", 1)
    assert report.problem == "tenant 'globex' chain, tenant position 1: hash mismatch"
    told = public_problem(report)
    assert told is not None
    assert "globex" not in told
