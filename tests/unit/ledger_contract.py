"""What the command side relies on of a ledger (``domain.ports.CommandLedger``), as tests:
the port itself, the command runner and the memory service running on it.

Each class here is a contract, not collected on its own: a test module subclasses it with
a ``ledger`` fixture. tests/unit/test_in_memory_ledger.py runs it on the in-memory ledger
(no database: the command runner and the write service's fast unit tests), and
tests/integration/test_ledger_conformance.py and test_command_runner.py on the PostgreSQL
ledger, so the in-memory ledger cannot drift from the one it stands in for."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from uuid import UUID

import pytest
from eventsourcing.persistence import IntegrityError

from memwarden.domain.ledger.app import Ledger as PostgresLedger
from memwarden.domain.ledger.app import StreamConflict
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.ledger.in_memory import InMemoryLedger
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.ledger.sealing import SealingError
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.errors import DomainError, Forbidden, InvalidRequest, NotFound
from memwarden.domain.model.events import (
    AuditRecorded,
    ClaimSet,
    Event,
    LeaseEvent,
    LeaseTaken,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.leases import decide_take, lease_from, lease_id
from memwarden.domain.model.write import Rejection
from memwarden.domain.services.claims import ClaimIds
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry, TooMuchContention
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.services.streams import Streams
from memwarden.domain.services.write_results import BatchItem
from tests.unit.builders import ADMIN, AGENT, NS, OTHER_AGENT, T0, cmd

Ledger = InMemoryLedger | PostgresLedger
"""The ledger under test (each has, besides the port, ``head_position``, ``read`` and
``verify``, what these tests read the log with)."""

CLAIM_KEY = bytes(range(32))


class Ids:
    """``new_id`` that remembers what it handed out."""

    def __init__(self) -> None:
        self.given: list[UUID] = []

    def __call__(self) -> UUID:
        self.given.append(new_uuid())
        return self.given[-1]


class Clock:
    """A clock the test moves."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def tick(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def appended(ledger: Ledger, after: int) -> list[Event]:
    return [r.event for r in ledger.read(after, 10_000)]


def audits(ledger: Ledger, after: int) -> list[AuditRecorded]:
    return [e for e in appended(ledger, after) if isinstance(e, AuditRecorded)]


# -- the port ---------------------------------------------------------------------------------


def audit(record_id: UUID, detail: str = "x") -> Recorded:
    event = AuditRecorded(
        record_id=record_id,
        actor="a",
        namespace=NS,
        role="agent",
        op="t",
        outcome="ok",
        detail=detail,
        at=T0,
    )
    return Recorded(record_id, 1, event)


def written(memory_id: UUID, content: str = "Dana lives in Lisbon") -> MemoryWritten:
    return MemoryWritten(
        memory_id=memory_id,
        namespace=NS,
        actor="agent-a",
        type="fact",
        scope="team",
        content=content,
        provenance=(Provenance(source="conversation", actor="agent-a"),),
        valid_from=T0,
        status="active",
        trust_tier="candidate",
        classification=Classification(),
        at=T0,
    )


class PortContract:
    """The port: atomic appends with optimistic concurrency, reads, sealing, the chain."""

    def test_an_append_takes_the_next_gapless_positions(self, ledger: Ledger) -> None:
        start = ledger.head_position()
        first, second = new_uuid(), new_uuid()
        assert ledger.append([audit(first), audit(second)], tenant="acme") == start + 2
        assert ledger.head_position() == start + 2
        assert [r.position for r in ledger.read(start, 10)] == [start + 1, start + 2]
        heads = ledger.stream_heads([first, second, new_uuid()])
        assert set(heads) == {first, second}  # a stream that does not exist is left out
        assert heads[first].event == audit(first).event
        assert heads[first].position == start + 1

    def test_streams_read_back_in_version_order(self, ledger: Ledger) -> None:
        stream = new_uuid()
        events = [Recorded(stream, v, _claim(stream)) for v in (1, 2, 3)]
        ledger.append(events[:1], tenant="acme")
        ledger.append(events[1:], tenant="acme")
        (found,) = ledger.streams([stream]).values()
        assert [(r.originator_version, r.event) for r in found] == [
            (r.originator_version, r.event) for r in events
        ]
        assert ledger.stream_heads([stream])[stream].originator_version == 3

    @pytest.mark.parametrize("collision", ["taken before", "twice in the append"])
    def test_a_taken_version_refuses_the_whole_append(self, ledger: Ledger, collision: str) -> None:
        """A version another append took is a conflict (decide again); one the append names
        twice itself is the caller's mistake (an integrity error). Either way nothing of the
        append goes in, not even its new data key."""
        stream, bystander = new_uuid(), new_uuid()
        refusal: type[Exception] = StreamConflict
        clash = [Recorded(stream, 1, _claim(stream))]
        if collision == "taken before":
            ledger.append([Recorded(stream, 1, _claim(stream))], tenant="acme")
        else:
            clash.append(Recorded(stream, 1, _claim(stream)))
            refusal = IntegrityError
        memory_id = new_uuid()
        key = ledger.new_data_key(memory_id)
        before = ledger.head_position()
        with pytest.raises(refusal):
            ledger.append(
                [audit(bystander), Recorded(memory_id, 1, written(memory_id)), *clash], [key], tenant="acme"
            )
        assert ledger.head_position() == before
        assert ledger.stream_heads([bystander, memory_id]) == {}
        assert ledger.data_keys.get(memory_id) is None

    def test_an_append_naming_a_version_twice_fails_alone(self, ledger: Ledger) -> None:
        """Appends from many threads at once, one of them naming a version twice: only that
        one fails (a commit group shared with it must not take the others down)."""
        bad = new_uuid()

        def good() -> int:
            return ledger.append([audit(new_uuid())], tenant="acme")

        def twice() -> int:
            return ledger.append(
                [Recorded(bad, 1, _claim(bad)), Recorded(bad, 1, _claim(bad))], tenant="acme"
            )

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(twice if n % 8 == 0 else good) for n in range(64)]
        failed = [n for n, f in enumerate(futures) if f.exception() is not None]
        assert failed == list(range(0, 64, 8))
        assert all(isinstance(futures[n].exception(), IntegrityError) for n in failed)

    def test_sealed_fields_need_their_owners_key_and_read_back_opened(self, ledger: Ledger) -> None:
        memory_id = new_uuid()
        with pytest.raises(SealingError):
            ledger.append([Recorded(memory_id, 1, written(memory_id))], tenant="acme")
        key = ledger.new_data_key(memory_id)
        position = ledger.append([Recorded(memory_id, 1, written(memory_id))], [key], tenant="acme")
        (row,) = ledger.read(position - 1, 1)
        assert row.event == written(memory_id)
        assert row.row is not None
        assert b"Lisbon" not in row.row.state  # the stored form holds ciphertext only
        ledger.data_keys.forget([memory_id])  # as another process, which never cached the key
        assert ledger.streams([memory_id])[memory_id][0].event == written(memory_id)  # stored with it

    def test_a_destroyed_key_leaves_the_sealed_fields_empty(self, ledger: Ledger) -> None:
        memory_id, record = new_uuid(), new_uuid()
        ledger.append(
            [Recorded(memory_id, 1, written(memory_id))], [ledger.new_data_key(memory_id)], tenant="acme"
        )
        ledger.append([audit(record)], destroy_keys=[memory_id], tenant="acme")
        (found,) = ledger.streams([memory_id])[memory_id]
        assert isinstance(found.event, MemoryWritten)
        assert found.event.content is None
        assert found.event.namespace == NS  # what is not sealed stays

    def test_the_chain_verifies(self, ledger: Ledger) -> None:
        ledger.append([audit(new_uuid()), audit(new_uuid())], tenant="acme")
        report = ledger.verify()
        assert report.ok, report
        assert report.checked == report.head_position == ledger.head_position()


def _claim(stream: UUID) -> ClaimSet:
    return ClaimSet(claim_id=stream, kind="text", namespace=NS, holders=(new_uuid(),), at=T0)


# -- the command runner -----------------------------------------------------------------------

LEASE = lease_id("contract", AGENT.namespace)


class RunnerContract:
    """The command runner on the ledger: a stream conflict re-decides on fresh state and only
    the committed attempt leaves its audit record; spent attempts end in TooMuchContention
    with the caches invalidated once; refusals and failures are audited."""

    @staticmethod
    def runner(ledger: Ledger, ids: Callable[[], UUID]) -> CommandRunner:
        return CommandRunner(ledger, Streams(ledger), Clock(), ids)

    @staticmethod
    def take(ledger: Ledger, now: datetime, holder: str) -> tuple[LeaseTaken, int]:
        head = ledger.stream_heads([LEASE]).get(LEASE)
        current = None
        if head is not None and isinstance(head.event, LeaseEvent):
            current = lease_from(head.event, head.originator_version)
        version = head.originator_version if head is not None else 0
        return decide_take(current, "contract", AGENT.namespace, holder, now, timedelta(seconds=1)), version

    def test_a_conflict_is_decided_again_and_only_the_committed_attempt_is_audited(
        self, ledger: Ledger
    ) -> None:
        ids = Ids()
        runner = self.runner(ledger, ids)
        attempts: list[int] = []

        def decide(_now: datetime) -> Decided[int]:
            event, read = self.take(ledger, T0 + timedelta(hours=2 * len(attempts)), "runner")
            attempts.append(read)
            if len(attempts) == 1:  # another writer takes the version this attempt read
                rival, _ = self.take(ledger, T0 - timedelta(hours=1), "rival")
                runner.run(None, "rival", lambda _n: Decided(result=int, events=[rival]), Retry("rival"))
            return Decided(result=int, events=[event], versions={LEASE: read}, note=Note("taken"))

        position = runner.command(AGENT, "runner.take", decide, Retry("contended"))

        assert attempts == [0, 1]  # the second attempt read the rival's version
        assert ledger.stream_heads([LEASE])[LEASE].originator_version == 2
        assert position == ledger.head_position()
        records = ledger.streams(ids.given)
        assert ids.given[0] not in records  # the refused attempt's record went with its append
        (last,) = records[ids.given[-1]]
        assert isinstance(last.event, AuditRecorded)
        assert (last.event.op, last.event.outcome, last.event.detail) == ("runner.take", "ok", "taken")

    def test_spent_attempts_raise_too_much_contention_and_invalidate_once(self, ledger: Ledger) -> None:
        runner = self.runner(ledger, Ids())
        conflicts: list[int] = []
        invalidated: list[bool] = []
        first, _ = self.take(ledger, T0, "first")
        runner.run(None, "first", lambda _n: Decided(result=int, events=[first]), Retry("first"))
        before = ledger.head_position()

        def decide(_now: datetime) -> Decided[int]:
            event, _ = self.take(ledger, T0 + timedelta(hours=2), "runner")
            return Decided(result=int, events=[event], versions={LEASE: 0})  # a stale read, every time

        retry = Retry(
            "kept moving",
            attempts=3,
            on_conflict=lambda: conflicts.append(1),
            invalidate=lambda: invalidated.append(True),
        )
        with pytest.raises(TooMuchContention, match="kept moving"):
            runner.run(None, "runner.take", decide, retry)
        assert len(conflicts) == 3
        assert invalidated == [True]
        assert ledger.head_position() == before  # nothing more was appended

    @pytest.mark.parametrize(
        ("error", "outcome"),
        [
            (NotFound("no such thing"), "miss"),
            (Forbidden("not yours"), "denied"),
            (RuntimeError("boom"), "error"),
        ],
    )
    def test_a_refused_or_failed_command_is_audited_on_its_own(
        self, ledger: Ledger, error: Exception, outcome: str
    ) -> None:
        ids = Ids()
        runner = self.runner(ledger, ids)

        def decide(_now: datetime) -> Decided[int]:
            raise error

        with pytest.raises(type(error)):
            runner.command(AGENT, "runner.refused", decide, Retry("contended"))
        (record_id,) = ids.given
        (recorded,) = ledger.streams([record_id])[record_id]
        record = recorded.event
        assert isinstance(record, AuditRecorded)
        assert (record.op, record.outcome, record.actor) == ("runner.refused", outcome, AGENT.actor)
        expected = f"{error.code}: {error.detail}" if isinstance(error, DomainError) else "RuntimeError"
        assert record.detail == expected


# -- the memory service's commands ----------------------------------------------------------------


def slot(content: str, value: str, source: str = "conversation") -> WriteMemory:
    return cmd(content, subject="dana", attribute="city", value=value, source=source)


class WriteServiceContract:
    """The memory service's commands run for real on the ledger: written, deduplicated on a
    retry, superseded, disputed and resolved, verified, rejected, refused, batched."""

    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def memory(self, ledger: Ledger, clock: Clock) -> MemoryService:
        return MemoryService(ledger, ClaimIds(CLAIM_KEY), clock=clock)

    def test_a_write_is_stored_sealed_with_its_claim_and_its_audit_record(
        self, ledger: Ledger, memory: MemoryService
    ) -> None:
        start = ledger.head_position()
        result = memory.write(AGENT, WriteMemory(content="The office opens at eight"))
        assert result.outcome == "stored"
        assert result.id is not None
        assert result.position == ledger.head_position()
        kinds = [type(e).__name__ for e in appended(ledger, start)]
        assert kinds == ["MemoryWritten", "ClaimSet", "AuditRecorded"]  # one append, in this order
        state = memory.memory(result.id)
        assert state is not None
        assert (state.content, state.namespace, state.actor, state.recorded_at) == (
            "The office opens at eight",
            AGENT.namespace,
            AGENT.actor,
            T0,
        )
        (record,) = audits(ledger, start)
        assert (record.op, record.outcome, record.subject_ids) == ("write", "ok", (result.id,))
        assert b"eight" not in b"".join(r.row.state for r in ledger.read(start, 10) if r.row is not None)

    def test_a_retried_write_is_deduplicated_onto_the_same_memory(
        self, ledger: Ledger, memory: MemoryService, clock: Clock
    ) -> None:
        first = memory.write(AGENT, WriteMemory(content="The office opens at eight"))
        clock.tick(minutes=1)
        start = ledger.head_position()
        again = memory.write(AGENT, WriteMemory(content="the office opens at eight"))
        assert (again.outcome, again.id) == ("deduplicated", first.id)
        assert "MemoryWritten" not in [type(e).__name__ for e in appended(ledger, start)]

    def test_a_newer_value_in_the_slot_supersedes(
        self, ledger: Ledger, memory: MemoryService, clock: Clock
    ) -> None:
        old = memory.write(AGENT, slot("Dana lives in Porto", "Porto"))
        clock.tick(days=1)
        new = memory.write(AGENT, slot("Dana lives in Lisbon", "Lisbon"))
        assert new.outcome == "superseded"
        assert new.supersedes == (old.id,)
        assert old.id is not None
        retired = memory.memory(old.id)
        assert retired is not None
        assert not retired.is_current(clock())

    def test_a_write_on_a_stale_cache_conflicts_and_is_decided_again(
        self, ledger: Ledger, memory: MemoryService, clock: Clock
    ) -> None:
        """Another process (its own stream cache) moved the slot on: this one's cached claim
        is stale, its append conflicts, and it decides again on the ledger's state."""
        elsewhere = MemoryService(ledger, ClaimIds(CLAIM_KEY), clock=clock)
        memory.write(AGENT, slot("Dana lives in Porto", "Porto"))
        clock.tick(hours=1)
        moved = elsewhere.write(AGENT, slot("Dana lives in Lisbon", "Lisbon"))
        clock.tick(hours=1)
        start = ledger.head_position()
        latest = memory.write(AGENT, slot("Dana lives in Madrid", "Madrid"))
        assert latest.outcome == "superseded"
        assert latest.supersedes == (moved.id,)  # not the Porto memory its cache named
        assert [a.op for a in audits(ledger, start)] == ["write"]  # the refused attempt left none

    def test_a_weaker_contradiction_is_disputed_and_a_reviewer_resolves_it(
        self, ledger: Ledger, memory: MemoryService, clock: Clock
    ) -> None:
        incumbent = memory.write(AGENT, slot("Dana lives in Porto", "Porto", source="document"))
        clock.tick(hours=1)
        challenger = memory.write(OTHER_AGENT, slot("Dana lives in Lisbon", "Lisbon"))
        assert challenger.outcome == "disputed"
        assert challenger.dispute_id is not None
        clock.tick(hours=1)
        resolved = memory.resolve_dispute(
            ADMIN, ResolveDispute(dispute_id=challenger.dispute_id, decision="uphold_new", reason="moved")
        )
        assert resolved.dispute.status == "resolved"
        assert resolved.position == ledger.head_position()
        assert incumbent.id is not None
        assert challenger.id is not None
        old, new = memory.memory(incumbent.id), memory.memory(challenger.id)
        assert old is not None
        assert new is not None
        assert (old.is_current(clock()), new.is_current(clock())) == (False, True)

    def test_another_agent_verifies_a_memory(self, ledger: Ledger, memory: MemoryService) -> None:
        stored = memory.write(AGENT, WriteMemory(content="The office opens at eight"))
        assert stored.id is not None
        with pytest.raises(DomainError):  # one's own write cannot be verified by oneself
            memory.verify(AGENT, VerifyMemory(memory_id=stored.id, supports=True))
        verified = memory.verify(OTHER_AGENT, VerifyMemory(memory_id=stored.id, supports=True))
        assert verified.id == stored.id
        assert verified.position == ledger.head_position()

    def test_a_rejected_write_appends_only_its_denial(self, ledger: Ledger, memory: MemoryService) -> None:
        start = ledger.head_position()
        result = memory.write(AGENT, WriteMemory(content="the deploy key is AKIAIOSFODNN7EXAMPLE"))
        assert result.outcome == "rejected"
        assert [r.reason for r in result.rejected] == ["secret_forbidden"]
        (record,) = appended(ledger, start)
        assert isinstance(record, AuditRecorded)
        assert (record.op, record.outcome) == ("write", "denied")

    def test_a_wrongly_typed_command_is_refused_before_the_ledger(
        self, ledger: Ledger, memory: MemoryService
    ) -> None:
        start = ledger.head_position()
        with pytest.raises(InvalidRequest, match="tags"):
            memory.write(AGENT, WriteMemory(content="Standup is at 9:30", tags="urgent"))  # type: ignore[arg-type]
        (record,) = appended(ledger, start)
        assert isinstance(record, AuditRecorded)
        assert (record.op, record.outcome) == ("write", "denied")

    def test_a_batch_is_decided_in_order_in_one_append(self, ledger: Ledger, memory: MemoryService) -> None:
        start = ledger.head_position()
        batch = memory.write_batch(
            AGENT,
            [
                BatchItem(command=slot("Dana lives in Porto", "Porto")),
                Rejection("invalid_request", "items[1]: not a write"),
                BatchItem(command=WriteMemory(content="dana lives in porto")),  # the first item's text
            ],
        )
        outcomes = [r.outcome for r in batch.results]
        assert outcomes == ["stored", "rejected", "deduplicated"]
        assert batch.results[2].id == batch.results[0].id
        assert batch.position == ledger.head_position()
        (record,) = audits(ledger, start)  # one record for the batch
        assert record.op == "write_batch"
        assert len({r.position for r in ledger.read(start, 100)}) == ledger.head_position() - start
