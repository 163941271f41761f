"""The command runner on a real ledger: a stream conflict re-decides on fresh state and
only the attempt that commits leaves its audit record; spent attempts end in
TooMuchContention with the caches invalidated once; refusals and failures are audited."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID

import pytest

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.errors import DomainError, Forbidden, NotFound
from memwarden.domain.model.events import AuditRecorded, LeaseEvent, LeaseTaken
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import decide_take, lease_from, lease_id
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry, TooMuchContention
from memwarden.domain.settings import Settings

WHO = Identity(namespace="acme/eng", actor="tester", role="agent")
STREAM = lease_id("runner-test", WHO.namespace)


class Ids:
    """``new_id`` that remembers what it handed out."""

    def __init__(self) -> None:
        self.given: list[UUID] = []

    def __call__(self) -> UUID:
        self.given.append(new_uuid())
        return self.given[-1]


@pytest.fixture
def core(settings: Settings) -> Iterator[Core]:
    with open_core(settings, embedder=None) as opened:
        yield opened


def runner_of(core: Core, ids: Ids) -> CommandRunner:
    return CommandRunner(core.ledger, core.memory.streams, core.memory.clock, ids)


def version(core: Core) -> int:
    head = core.ledger.stream_heads([STREAM]).get(STREAM)
    return head.originator_version if head is not None else 0


def take(core: Core, now: datetime, holder: str) -> tuple[LeaseTaken, int]:
    """The next take of the test lease (expired leases only: each take is 2 hours on)."""
    head = core.ledger.stream_heads([STREAM]).get(STREAM)
    current = None
    if head is not None and isinstance(head.event, LeaseEvent):
        current = lease_from(head.event, head.originator_version)
    return decide_take(current, "runner-test", WHO.namespace, holder, now, timedelta(seconds=1)), version(
        core
    )


def audit_of(core: Core, record_id: UUID) -> AuditRecorded | None:
    recorded = core.ledger.streams([record_id]).get(record_id, [])
    event = recorded[0].event if recorded else None
    return event if isinstance(event, AuditRecorded) else None


def test_a_conflict_is_decided_again_and_only_the_committed_attempt_is_audited(core: Core) -> None:
    ids = Ids()
    runner = runner_of(core, ids)
    attempts: list[int] = []
    start = core.memory.clock()

    def decide(now: datetime) -> Decided[int]:
        event, read = take(core, start + timedelta(hours=2 * len(attempts)), "runner")
        attempts.append(read)
        if len(attempts) == 1:  # another writer takes the version this attempt read
            rival, _ = take(core, start - timedelta(hours=1), "rival")
            runner.run(None, "rival", lambda _n: Decided(result=int, events=[rival]), Retry("rival"))
        return Decided(result=int, events=[event], versions={STREAM: read}, note=Note("taken"))

    position = runner.command(WHO, "runner.take", decide, Retry("contended"))

    assert attempts == [0, 1]  # the second attempt read the rival's version
    assert version(core) == 2
    assert position == core.ledger.head_position()
    audits = [audit_of(core, record_id) for record_id in ids.given]
    assert audits[0] is None  # the refused attempt's record went with its append
    assert audits[-1] is not None
    assert (audits[-1].op, audits[-1].outcome, audits[-1].detail) == ("runner.take", "ok", "taken")


def test_spent_attempts_raise_too_much_contention_and_invalidate_once(core: Core) -> None:
    runner = runner_of(core, Ids())
    conflicts: list[int] = []
    invalidated: list[bool] = []

    first, _ = take(core, core.memory.clock(), "first")
    runner.run(None, "first", lambda _n: Decided(result=int, events=[first]), Retry("first"))

    def decide(_now: datetime) -> Decided[int]:
        event, _ = take(core, core.memory.clock() + timedelta(hours=2), "runner")
        return Decided(result=int, events=[event], versions={STREAM: 0})  # a stale read, every time

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
    assert version(core) == 1  # nothing more was appended


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (NotFound("no such thing"), "miss"),
        (Forbidden("not yours"), "denied"),
        (RuntimeError("boom"), "error"),
    ],
)
def test_a_refused_or_failed_command_is_audited_on_its_own(
    core: Core, error: Exception, outcome: str
) -> None:
    ids = Ids()
    runner = runner_of(core, ids)

    def decide(_now: datetime) -> Decided[int]:
        raise error

    with pytest.raises(type(error)):
        runner.command(WHO, "runner.refused", decide, Retry("contended"))
    (record_id,) = ids.given
    audit = audit_of(core, record_id)
    assert audit is not None
    assert (audit.op, audit.outcome, audit.actor) == ("runner.refused", outcome, WHO.actor)
    expected = f"{error.code}: {error.detail}" if isinstance(error, DomainError) else "RuntimeError"
    assert audit.detail == expected
