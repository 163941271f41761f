"""Consolidation fed by the ledger: the dispatcher sends each namespace with new material
(memories, faults) once per batch, through Dramatiq or in-process; clusters from facts
faulted together and from fault near-misses."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import ContextFaulted, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.autopilot.views import ProposalView
from memwarden.workers.dispatcher import Dispatcher, new_material
from memwarden.workers.main import InProcessAutopilot, WorkerProcess
from tests.conftest import on_redis
from tests.processes import eventually

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent")
SALES = Identity(namespace="acme/sales", actor="bot", role="agent")
REVIEWER = Identity(namespace="acme", actor="rev", role="admin")
NS = AGENT.namespace


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def write(rt: Runtime, identity: Identity, content: str) -> int:
    result = rt.memory.write(identity, WriteMemory(content=content))
    assert result.outcome == "stored", result
    return result.position


def proposals(rt: Runtime, kind: str | None = None) -> list[ProposalView]:
    found = rt.reads.proposals(REVIEWER, after=rt.ledger.head_position()).items
    return [p for p in found if kind is None or p.kind == kind]


def positions(rt: Runtime, namespace: str) -> list[int]:
    """Where the namespace's memories and faults stand on the ledger."""
    return [
        int(r.position or 0)
        for r in rt.ledger.read(0, 10_000)
        if isinstance(r.event, (MemoryWritten, ContextFaulted)) and r.event.namespace == namespace
    ]


def test_one_trigger_per_namespace_and_batch_at_its_last_material(runtime: Runtime) -> None:
    write(runtime, AGENT, "The deploy freeze starts on the 20th of December")
    write(runtime, SALES, "The sales kickoff is in Lisbon this year")
    last = write(runtime, AGENT, "Release notes are published on the wiki on Thursdays")
    runtime.working_sets.fault(SALES, "Where is the sales kickoff?", after=last)
    assert len(positions(runtime, NS)) == 2
    sales = positions(runtime, SALES.namespace)
    assert isinstance(runtime.ledger.read(sales[-1] - 1, 1)[0].event, ContextFaulted)
    sent: list[tuple[str, int]] = []
    dispatcher = Dispatcher(
        runtime.ledger, lambda ns, at: sent.append((ns, at)), name="t", select=new_material
    )
    dispatcher.register()
    assert dispatcher.catch_up() > 0
    assert sorted(sent) == [(NS, positions(runtime, NS)[-1]), (SALES.namespace, sales[-1])]
    assert dispatcher.catch_up() == 0  # nothing new: nothing sent again
    assert len(sent) == 2


def test_a_failed_send_stops_the_batch_and_is_sent_again(runtime: Runtime) -> None:
    write(runtime, SALES, "The sales kickoff is in Lisbon this year")
    write(runtime, AGENT, "Release notes are published on the wiki on Thursdays")
    sent: list[tuple[str, int]] = []
    broken = {"down": True}

    def send(namespace: str, position: int) -> None:
        if broken["down"] and namespace == NS:
            raise ConnectionError("broker down")
        sent.append((namespace, position))

    dispatcher = Dispatcher(runtime.ledger, send, name="t", select=new_material)
    dispatcher.register()
    with pytest.raises(ConnectionError):
        dispatcher.dispatch_once()
    assert dispatcher.position() == positions(runtime, NS)[-1] - 1
    broken["down"] = False
    dispatcher.catch_up()
    assert sent[-1] == (NS, positions(runtime, NS)[-1])
    assert [ns for ns, _ in sent] == [SALES.namespace, NS]


def test_facts_faulted_together_become_a_proposal(runtime: Runtime) -> None:
    a = runtime.memory.write(
        AGENT, WriteMemory(content="The staging database is restored from backup on Sundays")
    )
    b = runtime.memory.write(
        AGENT, WriteMemory(content="Restoring the staging database from backup takes an hour")
    )
    for question in (
        "When is the staging database restored from backup?",
        "staging database restored from backup",
    ):
        answer = runtime.working_sets.fault(AGENT, question, after=runtime.ledger.head_position())
        assert answer.source == "L2"
        assert {x.ref for x in answer.blocks} >= {a.id, b.id}
    result = runtime.consolidation.consolidate(NS, runtime.ledger.head_position(), "worker-1")
    drafted = [runtime.consolidation.proposal(p) for p in result.drafted]
    together = [p for p in drafted if p is not None and p.kind == "faulted_together"]
    assert len(together) == 1
    assert set(together[0].sources) == {a.id, b.id}
    again = runtime.consolidation.consolidate(NS, runtime.ledger.head_position(), "worker-1")
    assert again.drafted == ()  # proposed once


@pytest.mark.minilm  # near misses are found by meaning (cosine >= 0.75)
def test_a_near_miss_with_its_neighbours_becomes_a_proposal(runtime: Runtime) -> None:
    ids = [
        runtime.memory.write(AGENT, WriteMemory(content=text)).id
        for text in (
            "The on-call rotation for the platform team changes every Monday morning",
            "Platform on-call rotation handover happens on Monday mornings at nine",
        )
    ]
    answer = runtime.working_sets.fault(
        AGENT, "who is paged for platform incidents at night", after=runtime.ledger.head_position()
    )
    faults = [r.event for r in runtime.ledger.read(0, 10_000) if isinstance(r.event, ContextFaulted)]
    assert faults[-1].tier != "L2", answer
    assert faults[-1].best_candidate in ids
    result = runtime.consolidation.consolidate(NS, runtime.ledger.head_position(), "worker-1")
    drafted = [runtime.consolidation.proposal(p) for p in result.drafted]
    near = [p for p in drafted if p is not None and p.kind == "fault_near_miss"]
    assert len(near) == 1
    assert set(near[0].sources) == set(ids)


DUPLICATES = (
    "The staging cluster is rebuilt from the golden image every Sunday night",
    "Every Sunday night the staging cluster is rebuilt from the golden image",
)


def test_the_worker_process_sends_new_material_to_the_consolidation_actor(settings: Settings) -> None:
    process = WorkerProcess(msgspec.structs.replace(settings, consolidation_pause_seconds=0.5), threads=2)
    process.broker.flush_all()
    process.start()
    try:
        for text in DUPLICATES:
            write(process.runtime, AGENT, text)
        found = eventually(lambda: proposals(process.runtime, "near_duplicate"))
        assert len(found) == 1
    finally:
        process.stop()


def test_serve_without_redis_consolidates_in_process(runtime: Runtime) -> None:
    runtime.settings = msgspec.structs.replace(runtime.settings, consolidation_pause_seconds=0.5)
    loop = InProcessAutopilot(runtime)
    loop.start()
    try:
        for text in DUPLICATES:
            write(runtime, AGENT, text)
        found = eventually(lambda: proposals(runtime, "near_duplicate"))
        assert len(found) == 1
    finally:
        loop.stop()


def test_a_dispatcher_behind_the_ledger_catches_up_without_waiting_its_pause(runtime: Runtime) -> None:
    """Consolidation's dispatcher paces itself with a pause (30 s by default) once it keeps
    up; behind the ledger it must not wait between spans, or a ledger growing faster than
    a span per pause (every read is audited) leaves it behind for good, and a quiet
    namespace's new material is never sent. While behind, triggers are still coalesced
    per namespace over each span."""
    for n in range(12):
        who = AGENT if n % 2 else SALES
        write(runtime, who, f"Runbook page {n} covers the {('ingest', 'billing', 'search')[n % 3]} service")
    sent: list[tuple[str, int]] = []
    dispatcher = Dispatcher(
        runtime.ledger,
        lambda ns, at: sent.append((ns, at)),
        name="t",
        select=new_material,
        pause=60.0,
        span=2,
        batch_size=4,
    )
    dispatcher.register()
    head = runtime.ledger.head_position()
    dispatcher.start()
    try:
        eventually(lambda: dispatcher.position() == head, 10)
    finally:
        dispatcher.stop()
    spans = -(-head // 8)
    assert len(sent) <= 2 * spans  # a namespace at most once per span of 8 events
    assert (NS, positions(runtime, NS)[-1]) in sent
    assert (SALES.namespace, positions(runtime, SALES.namespace)[-1]) in sent
