"""Async write tickets as the actor runs them, without a broker: ``apply_ticket`` claims the
ticket in its table, applies it once and records the result; a redelivery, a second worker
or a claimant whose claim went stale changes nothing."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import QUEUED_OP, BatchItem
from memwarden.domain.settings import Settings
from memwarden.workers.actors import run_ticket
from memwarden.workers.tickets import TicketStore, apply_ticket

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as rt:
        yield rt


def store_of(rt: Runtime, stale_seconds: float = 60.0) -> TicketStore:
    return TicketStore(rt.ledger.datastore, rt.ledger.schema, stale_seconds)


def ledger_counts(rt: Runtime) -> tuple[Counter[str], int]:
    """Memories written by content (in the clear: the test's runtime holds the keys), and
    the audit records of queued writes that ran."""
    events = [r.event for r in rt.ledger.read(0, 100_000)]
    written = Counter(e.content or "" for e in events if isinstance(e, MemoryWritten))
    ran = sum(1 for e in events if isinstance(e, AuditRecorded) and e.op == QUEUED_OP)
    return written, ran


def test_a_ticket_delivered_three_times_is_applied_once(runtime: Runtime) -> None:
    store = store_of(runtime)
    ticket = store.submit(
        AGENT, "k-test", BatchItem(command=WriteMemory(content="Rollbacks take ten minutes"))
    )
    write = runtime.memory.run_queued
    assert [apply_ticket(store, write, ticket) for _ in range(3)] == ["done", None, None]
    status = store.status(ticket, AGENT)
    assert status is not None
    assert status.state == "done"
    assert status.result is not None
    assert status.result["outcome"] == "stored"
    written, ran = ledger_counts(runtime)
    assert written["Rollbacks take ten minutes"] == 1
    assert ran == 1


def test_workers_racing_for_one_ticket_apply_it_once(runtime: Runtime) -> None:
    store = store_of(runtime)
    ticket = store.submit(AGENT, "k-test", BatchItem(command=WriteMemory(content="Backups run at 02:00 UTC")))
    start = threading.Barrier(6)
    outcomes: list[object] = []

    def deliver() -> None:
        start.wait()
        outcomes.append(apply_ticket(store, runtime.memory.run_queued, ticket))

    threads = [threading.Thread(target=deliver) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert Counter(outcomes) == {"done": 1, None: 5}
    written, ran = ledger_counts(runtime)
    assert written["Backups run at 02:00 UTC"] == 1
    assert ran == 1


def test_a_claim_that_went_stale_records_nothing(runtime: Runtime) -> None:
    store = store_of(runtime, stale_seconds=0.0)  # every claim is stale at once
    ticket = store.submit(
        AGENT, "k-test", BatchItem(command=WriteMemory(content="Deploys freeze on Fridays"))
    )
    first = store.claim_ticket(ticket)
    second = store.claim_ticket(ticket)  # the first claimant counts as dead
    assert first is not None
    assert second is not None
    assert second.claimed_at > first.claimed_at
    assert store.finish(first, "done", {"late": True}) is False
    assert store.finish(second, "done", {"outcome": "stored"}) is True
    assert store.claim_ticket(ticket) is None  # done: nothing to claim, stale or not
    status = store.status(ticket, AGENT)
    assert status is not None
    assert status.result == {"outcome": "stored"}


def test_a_refused_write_fails_its_ticket_and_a_damaged_message_is_dropped(runtime: Runtime) -> None:
    store = store_of(runtime)
    reader = Identity(namespace="acme/eng", actor="viewer", role="reader")
    ticket = store.submit(reader, "k-test", BatchItem(command=WriteMemory(content="Readers cannot write")))
    assert run_ticket(store, runtime.memory.run_queued, str(ticket)) == "failed"
    status = store.status(ticket, reader)
    assert status is not None
    assert status.state == "failed"
    assert status.result is not None
    assert status.result["error"] == "forbidden"
    head = runtime.ledger.head_position()
    for damaged in ("not-a-ticket", None, 7):
        assert run_ticket(store, runtime.memory.run_queued, damaged) is None
    assert runtime.ledger.head_position() == head


def test_overdue_names_tickets_left_pending_or_stale(runtime: Runtime) -> None:
    store = store_of(runtime, stale_seconds=0.0)
    pending = store.submit(AGENT, "k-test", BatchItem(command=WriteMemory(content="Pending ticket one")))
    claimed = store.submit(AGENT, "k-test", BatchItem(command=WriteMemory(content="Claimed ticket two")))
    assert store.claim_ticket(claimed) is not None
    assert set(store.overdue(0.0)) == {pending, claimed}
    assert store.overdue(3600.0) == [claimed]  # not pending that long; the claim is stale
    counts, oldest = store.open_counts()
    assert counts == {"pending": 1, "running": 1}
    assert oldest >= 0.0
