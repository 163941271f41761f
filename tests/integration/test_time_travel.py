"""Bitemporal as-of reads: indexed SQL over ``memory_timeline`` and a replay of the ledger
must give the same answer, at any instant, for any caller (docs/architecture.md section 3)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.asof import AsOfAnswer, evolve_standing, standing_of
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState, evolve_memory
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.services.claims import ClaimIds
from memwarden.domain.services.memory import MemoryService
from memwarden.domain.settings import Settings
from memwarden.projections.timeline.service import AsOfQuestion

BASE = datetime(2031, 1, 1, tzinfo=UTC)


class FakeClock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as rt:
        yield rt


def service(runtime: Runtime, clock: FakeClock) -> MemoryService:
    return MemoryService(runtime.ledger, ClaimIds(runtime.ledger.secret("claim-ids")), clock=clock)


def both(runtime: Runtime, question: AsOfQuestion, snapshots: bool = False) -> AsOfAnswer:
    check = runtime.reads.time_travel.verify(question, snapshots=snapshots)
    assert check.ok, "\n".join(check.differences)
    return check.sql


def ids(answer: AsOfAnswer) -> list[uuid.UUID]:
    return sorted(m.id for m in answer.memories)


def slot(content: str, value: str, source: str, when: datetime | None = None) -> WriteMemory:
    return WriteMemory(
        content=content,
        subject="dana",
        attribute="city",
        value=value,
        provenance=ProvenanceClaim(source=source),
        event_time=when,
    )


def test_succession_correction_dispute_and_verification_read_as_they_stood(runtime: Runtime) -> None:
    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    hr = Identity("acme/eng", "hr", "member")
    peer = Identity("acme/eng", "agent-2", "agent")
    lead = Identity("acme", "lead", "admin")
    jan, mar = datetime(2031, 1, 1, tzinfo=UTC), datetime(2031, 3, 1, tzinfo=UTC)

    t0 = clock.advance(10)
    lyon = memory.write(agent, slot("Dana lives in Lyon", "Lyon", "conversation", jan))
    t1 = clock.advance(10)
    oslo = memory.write(hr, slot("Dana lives in Oslo", "Oslo", "manual", mar))  # succession
    assert oslo.outcome == "superseded"
    t2 = clock.advance(10)
    rumour = memory.write(agent, slot("Dana lives in Rome", "Rome", "conversation", mar))
    assert rumour.outcome == "disputed"
    t3 = clock.advance(10)
    memory.verify(peer, VerifyMemory(memory_id=oslo.id, supports=True))  # type: ignore[arg-type]
    t4 = clock.advance(10)
    assert rumour.dispute_id is not None
    memory.resolve_dispute(lead, ResolveDispute(dispute_id=rumour.dispute_id, decision="uphold_new"))
    t5 = clock.advance(10)
    scope = ancestors("acme/eng")

    def at(t: datetime, v: datetime | None = None) -> AsOfAnswer:
        return both(runtime, AsOfQuestion(scope=scope, as_of=t, valid_at=v))

    assert at(t0 - timedelta(seconds=1)).memories == []
    assert ids(at(t0 + timedelta(seconds=1), jan + timedelta(days=1))) == [lyon.id]
    # after the succession: Lyon still believed for January, Oslo for March
    assert ids(at(t1 + timedelta(seconds=1), jan + timedelta(days=1))) == [lyon.id]
    assert ids(at(t1 + timedelta(seconds=1), mar + timedelta(days=1))) == [oslo.id]
    # the disputed rumour is invisible while quarantined
    assert ids(at(t2 + timedelta(seconds=1), mar + timedelta(days=1))) == [oslo.id]
    tiers = {m.id: m.trust_tier for m in at(t3 + timedelta(seconds=1), mar + timedelta(days=1)).memories}
    assert tiers == {oslo.id: "verified"}
    before = {m.id: m.trust_tier for m in at(t2 + timedelta(seconds=1), mar + timedelta(days=1)).memories}
    assert before == {oslo.id: "canonical"}
    # upheld: the rumour is released and corrects Oslo (retired in system time)
    after = at(t4 + timedelta(seconds=1), mar + timedelta(days=1))
    assert ids(after) == [rumour.id]
    assert after.memories[0].trust_tier == "canonical"
    # valid_at alone = what we believe now about March; as_of now by default
    now_answer = both(runtime, AsOfQuestion(scope=scope, as_of=t5, valid_at=mar + timedelta(days=1)))
    assert ids(now_answer) == [rumour.id]
    # the content comes back, and a sibling namespace sees nothing
    assert {m.content for m in after.memories} == {"Dana lives in Rome"}
    assert at(t5).position >= at(t4).position
    sibling = both(runtime, AsOfQuestion(scope=ancestors("acme/sales"), as_of=t5, valid_at=mar))
    assert sibling.memories == []


def test_position_is_the_prefix_before_the_first_later_event(runtime: Runtime) -> None:
    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    first = memory.write(agent, WriteMemory(content="The build cache lives on host alpha"))
    clock.advance(5)
    memory.write(agent, WriteMemory(content="Release trains leave on Thursdays"))
    answer = both(runtime, AsOfQuestion(scope=ancestors("acme/eng"), as_of=BASE + timedelta(seconds=1)))
    assert answer.position == first.position
    assert ids(answer) == [first.id]  # type: ignore[list-item]


def test_paging_and_query_agree(runtime: Runtime) -> None:
    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    for n in range(7):
        clock.advance(1)
        memory.write(
            agent, WriteMemory(content=f"Service {n} deploys on Tuesday {'blue' if n % 2 else 'green'}")
        )
    scope = ancestors("acme/eng")
    seen: list[uuid.UUID] = []
    cursor = None
    while True:
        tt = runtime.reads.time_travel
        question = AsOfQuestion(
            scope=scope, as_of=clock.advance(1), limit=3, after=cursor and uuid.UUID(cursor)
        )
        sql, replay = tt.sql(question), tt.replay(question, snapshots=False)
        assert sql.memories == replay.memories
        assert sql.next_cursor == replay.next_cursor
        seen += [m.id for m in sql.memories]
        cursor = sql.next_cursor
        if cursor is None:
            break
    assert len(seen) == 7
    assert seen == sorted(seen)
    blue = both(runtime, AsOfQuestion(scope=scope, as_of=clock.now, query="TUESDAY blue"))
    assert len(blue.memories) == 3


def test_snapshots_give_the_same_answer(runtime: Runtime) -> None:
    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    times = []
    for n in range(30):
        times.append(clock.advance(1))
        memory.write(agent, WriteMemory(content=f"Runbook step {n} is reviewed by the on-call lead"))
    saved = runtime.reads.time_travel.replayer.take_snapshots(every=20)
    assert saved
    tt = runtime.reads.time_travel
    for t in [*times[::5], clock.advance(1)]:
        question = AsOfQuestion(scope=ancestors("acme/eng"), as_of=t)
        without = tt.replay(question, snapshots=False)
        with_snapshots = tt.replay(question, snapshots=True)
        assert with_snapshots.memories == without.memories
        sql = tt.sql(question)
        assert (with_snapshots.position, with_snapshots.memories) == (sql.position, sql.memories)
    assert tt.replayer.last.snapshot_position > 0
    snapshot_rows = tt.replayer.snapshots()
    assert all(size > 0 for *_, size in snapshot_rows)


# -- the property ------------------------------------------------------------------------------

NAMESPACES = ("t", "t/a", "t/a/b", "t/c")
ACTORS = ("ann", "bob", "cyd")
CONTENTS = ("Dana lives in Lyon", "Dana lives in Oslo", "The VPN needs a token", "Backups run nightly")
VALUES = ("Lyon", "Oslo", "Rome")
SOURCES = ("conversation", "document", "manual")
DECISIONS = ("uphold_new", "keep_old", "edit", "both_valid")

write_op = st.tuples(
    st.just("write"),
    st.sampled_from(NAMESPACES),
    st.sampled_from(ACTORS),
    st.sampled_from(CONTENTS),
    st.sampled_from((None, *VALUES)),
    st.sampled_from(SOURCES),
    st.one_of(st.none(), st.integers(-200, 200)),
    st.integers(1, 60),
)
resolve_op = st.tuples(st.just("resolve"), st.integers(0, 50), st.sampled_from(DECISIONS), st.integers(1, 60))
verify_op = st.tuples(
    st.just("verify"), st.integers(0, 50), st.sampled_from(ACTORS), st.booleans(), st.integers(1, 60)
)
contest_op = st.tuples(
    st.just("contest"),
    st.sampled_from(NAMESPACES),
    st.sampled_from(VALUES),
    st.sampled_from(VALUES),
    st.integers(1, 60),
)
history_ops = st.lists(
    st.one_of(write_op, write_op, contest_op, resolve_op, resolve_op, verify_op), min_size=3, max_size=24
)
probes = st.lists(
    st.tuples(
        st.integers(-5, 1000), st.one_of(st.none(), st.integers(-300, 300)), st.sampled_from(NAMESPACES)
    ),
    min_size=4,
    max_size=8,
)
_runs = itertools.count()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=history_ops, questions=probes)
def test_sql_and_replay_agree_on_random_histories(
    runtime: Runtime, operations: list[tuple[object, ...]], questions: list[tuple[int, int | None, str]]
) -> None:
    run = next(_runs)
    tenant = f"p{run}"
    clock = FakeClock(BASE + timedelta(days=30 * run))
    start = clock.now
    memory = service(runtime, clock)
    written: list[uuid.UUID] = []
    disputes: list[uuid.UUID] = []
    planted: dict[str, set[uuid.UUID]] = {}
    for op in operations:
        try:
            if op[0] == "write":
                _, ns, actor, content, value, source, shift, gap = op
                clock.advance(float(gap))  # type: ignore[arg-type]
                role = "member" if source == "manual" else "agent"
                who = Identity(tenant + str(ns)[1:], str(actor), role)  # type: ignore[arg-type]
                when = None if shift is None else clock.now + timedelta(days=int(shift))  # type: ignore[call-overload]
                command = WriteMemory(
                    content=str(content) if value is None else f"{content} ({value})",
                    subject="dana" if value is not None else None,
                    attribute="city" if value is not None else None,
                    value=value,  # type: ignore[arg-type]
                    provenance=ProvenanceClaim(source=str(source)),
                    event_time=when,
                )
                result = memory.write(who, command)
                event(f"write {result.outcome}")
                if result.id is not None:
                    written.append(result.id)
                if result.outcome == "stored" and value is None and shift is None:
                    planted.setdefault(who.namespace, set()).add(result.id)  # type: ignore[arg-type]
                if result.dispute_id is not None:
                    disputes.append(result.dispute_id)
            elif op[0] == "contest":
                # a manual fact, then a weaker contradiction of it: a dispute opens
                _, ns, strong, weak, gap = op
                for source, value, role in (("manual", strong, "member"), ("conversation", weak, "agent")):
                    clock.advance(float(gap))  # type: ignore[arg-type]
                    who = Identity(tenant + str(ns)[1:], "cyd" if role == "agent" else "hr", role)  # type: ignore[arg-type]
                    result = memory.write(who, slot(f"Dana lives in {value}", str(value), source))
                    event(f"contest {result.outcome}")
                    if result.id is not None:
                        written.append(result.id)
                    if result.dispute_id is not None:
                        disputes.append(result.dispute_id)
            elif op[0] == "resolve" and disputes:
                _, pick, decision, gap = op
                clock.advance(float(gap))  # type: ignore[arg-type]
                dispute_id = disputes[int(pick) % len(disputes)]  # type: ignore[call-overload]
                content = f"Edited fact {pick}" if decision == "edit" else None
                event(f"resolve {decision}")
                memory.resolve_dispute(
                    Identity(tenant, "lead", "admin"),
                    ResolveDispute(dispute_id=dispute_id, decision=decision, content=content),  # type: ignore[arg-type]
                )
            elif op[0] == "verify" and written:
                _, pick, actor, supports, gap = op
                clock.advance(float(gap))  # type: ignore[arg-type]
                target = written[int(pick) % len(written)]  # type: ignore[call-overload]
                state = memory.memory(target)
                assert state is not None
                memory.verify(
                    Identity(state.namespace, str(actor), "agent"),
                    VerifyMemory(memory_id=target, supports=bool(supports)),
                )
        except DomainError:
            pass  # refused commands are part of a realistic history (audited, no memory change)
    end = clock.advance(1)
    span = (end - start).total_seconds()
    for offset, valid_shift, ns in questions:
        as_of = start + timedelta(seconds=span * offset / 1000)
        valid_at = None if valid_shift is None else as_of + timedelta(days=valid_shift)
        caller = tenant + ns[1:]
        both(runtime, AsOfQuestion(scope=ancestors(caller), as_of=as_of, valid_at=valid_at))
    # control: a caller that planted plain facts (no slot, valid from when recorded) sees them
    for namespace, facts in planted.items():
        answer = both(runtime, AsOfQuestion(scope=ancestors(namespace), as_of=end))
        assert facts <= set(ids(answer)), f"{namespace} planted {len(facts)} facts and misses some"


def test_evolve_standing_follows_evolve_memory(runtime: Runtime) -> None:
    """The projection's fold and the domain's fold agree on every field an as-of reads."""
    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    hr = Identity("acme/eng", "hr", "member")
    memory.write(agent, slot("Dana lives in Lyon", "Lyon", "conversation", BASE))
    clock.advance(5)
    memory.write(hr, slot("Dana lives in Oslo", "Oslo", "manual", BASE + timedelta(days=40)))
    clock.advance(5)
    memory.write(hr, slot("Dana lives in Bergen", "Bergen", "manual", BASE + timedelta(days=20)))
    events = runtime.ledger.read(0, 1000)
    states: dict[uuid.UUID, MemoryState] = {}
    for recorded in events:
        memory_id = getattr(recorded.event, "memory_id", None)
        if memory_id is None or type(recorded.event).__name__.startswith("Dispute"):
            continue
        before = states.get(memory_id)
        after = evolve_memory(before, recorded.event)
        standing = evolve_standing(standing_of(before) if before else None, recorded.event)
        assert standing == standing_of(after)
        states[memory_id] = after


def test_an_erased_memory_is_a_tombstone_at_every_instant(runtime: Runtime) -> None:
    from memwarden.domain.model.erasure import Forget  # noqa: PLC0415 - erasure is its own feature

    clock = FakeClock(BASE)
    memory = service(runtime, clock)
    agent = Identity("acme/eng", "agent-1", "agent")
    kept = memory.write(agent, WriteMemory(content="The office opens at nine"))
    gone = memory.write(agent, WriteMemory(content="Dana's home phone is 555 0100 9999"))
    assert gone.id is not None
    believed_at = clock.advance(10)
    runtime.core.erasure.clock = clock
    runtime.core.erasure.forget(
        Identity("acme/eng", "hr", "admin"),
        Forget(ids=(gone.id,), reason="subject request"),
        now=clock.advance(10),
    )
    scope = ancestors("acme/eng")
    before = both(runtime, AsOfQuestion(scope=scope, as_of=believed_at))
    assert {m.id: m.content for m in before.memories} == {kept.id: "The office opens at nine", gone.id: None}
    after = both(runtime, AsOfQuestion(scope=scope, as_of=clock.advance(1)))
    assert ids(after) == [kept.id]
    assert both(runtime, AsOfQuestion(scope=scope, as_of=believed_at, query="phone")).memories == []
