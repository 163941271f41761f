"""The autopilot's pure rules: leases and their tokens, the dial's settlements, findings
and their resolution, the reversal of a settlement. No I/O: states and ``now`` in."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from memwarden.domain.model.autopilot import (
    DecisionState,
    FindingState,
    OverturnDecision,
    Pair,
    ResolveFinding,
    decide_overturn,
    decide_pass,
    decide_resolve_finding,
)
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import (
    ConflictSettled,
    ConflictsJudged,
    FindingOpened,
    LeaseTaken,
    MemoryRetired,
    MemorySuperseded,
    MemoryWritten,
    SettlementOverturned,
)
from memwarden.domain.model.judging import Judgement
from memwarden.domain.model.leases import Lease, LeaseBusy, LeaseLost, decide_take, lease_from, release
from tests.unit.builders import ADMIN, AGENT, NS, at, ident, memory, uid

TTL = timedelta(seconds=30)
SAYS_NO = Judgement(verdict="contradiction", rule="frame", explanation="the same frame with another time")
SAYS_OK = Judgement(verdict="compatible", rule="none", explanation="no rule finds a contradiction")


def _ids() -> itertools.count[int]:
    return itertools.count(9_000)


def _pass(new, old, dial, judgement=SAYS_NO):  # type: ignore[no-untyped-def]
    counter = _ids()
    return decide_pass(
        new,
        [Pair(neighbour=old, cosine=0.9, judgement=judgement)],
        dial,
        "rules",
        4,
        at(),
        (uid(next(counter)) for _ in iter(int, 1)),
    )


def test_a_lease_is_taken_with_the_next_token_and_busy_while_live() -> None:
    first = decide_take(None, "autopilot", NS, "w1", at(), TTL)
    assert (first.token, first.expires_at) == (1, at() + TTL)
    lease = lease_from(first, 1)
    for holder in ("w1", "w2"):  # its own holder too: one pass at a time
        with pytest.raises(LeaseBusy):
            decide_take(lease, "autopilot", NS, holder, at() + timedelta(seconds=5), TTL)
    taken = decide_take(lease, "autopilot", NS, "w2", at() + TTL, TTL)  # expired: a takeover
    assert isinstance(taken, LeaseTaken)
    assert taken.token == 2
    freed = lease_from(release(lease, at(hours=0) + timedelta(seconds=1)), 2)
    assert decide_take(freed, "autopilot", NS, "w3", at() + timedelta(seconds=2), TTL).token == 2
    with pytest.raises(LeaseLost):  # past its expiry a holder may not fence an append
        release(lease, at() + TTL)
    with pytest.raises(ValueError, match="positive"):
        decide_take(None, "autopilot", NS, "w1", at(), timedelta(0))


@pytest.mark.parametrize(
    ("dial", "new_source", "old_source", "expected"),
    [
        ("lower_trust", "conversation", "conversation", "finding"),
        ("lower_trust", "manual", "conversation", "new wins"),
        ("lower_trust", "conversation", "manual", "finding"),
        ("auto", "conversation", "conversation", "new wins"),  # equal rank: the newer
        ("auto", "conversation", "manual", "old wins"),
        ("all", "manual", "conversation", "finding"),
    ],
)
def test_the_dial_settles_or_queues_a_finding(
    dial: str, new_source: str, old_source: str, expected: str
) -> None:
    old = memory(content="Standup is at 9:30", source=old_source, recorded_at=at(-2))
    new = memory(content="Standup is at 10:00", source=new_source, recorded_at=at(-1))
    events = _pass(new, old, dial)
    judged = events[0]
    assert isinstance(judged, ConflictsJudged)
    assert (judged.outcome, judged.pairs, judged.contradictions, judged.token) == ("judged", 1, 1, 4)
    findings = [e for e in events if isinstance(e, FindingOpened)]
    settled = [e for e in events if isinstance(e, ConflictSettled)]
    superseded = [e for e in events if isinstance(e, MemorySuperseded)]
    if expected == "finding":
        assert [(f.memory_a, f.memory_b) for f in findings] == [(old.id, new.id)]
        assert not settled
        assert not superseded
    else:
        winner, loser = (new, old) if expected == "new wins" else (old, new)
        assert [(s.winner, s.loser, s.dial) for s in settled] == [(winner.id, loser.id, dial)]
        assert [(s.memory_id, s.by, s.reason) for s in superseded] == [(loser.id, winner.id, "autopilot")]
        assert not findings


def test_no_contradiction_no_event_but_the_judgement_and_another_namespace_is_a_finding() -> None:
    old = memory(content="Standup is at 9:30", recorded_at=at(-2))
    new = memory(content="Standup is at 9:30 sharp", recorded_at=at(-1))
    assert [type(e) for e in _pass(new, old, "auto", SAYS_OK)] == [ConflictsJudged]
    org = memory(content="Standup is at 9:30", namespace="acme", recorded_at=at(-2))
    assert [type(e) for e in _pass(new, org, "auto")] == [ConflictsJudged, FindingOpened]


def _finding(a: object, b: object, status: str = "open") -> FindingState:
    return FindingState(
        id=uid(77),
        namespace=NS,
        memory_a=a.id,  # type: ignore[attr-defined]
        memory_b=b.id,  # type: ignore[attr-defined]
        judge="rules",
        rule="frame",
        explanation="x",
        cosine=0.9,
        group_id=b.id,  # type: ignore[attr-defined]
        opened_at=at(-1),
        status=status,  # type: ignore[arg-type]
    )


def test_resolving_a_finding_retires_the_rejected_memory_or_nothing() -> None:
    a, b = memory(recorded_at=at(-2)), memory(recorded_at=at(-1))
    finding = _finding(a, b)
    keep_a = decide_resolve_finding(
        ResolveFinding(finding_id=finding.id, decision="keep_a"), ADMIN, finding, a, b, at()
    )
    assert [(e.memory_id, e.kept) for e in keep_a if isinstance(e, MemoryRetired)] == [(b.id, a.id)]
    for decision in ("both_valid", "dismiss"):
        events = decide_resolve_finding(
            ResolveFinding(finding_id=finding.id, decision=decision), ADMIN, finding, a, b, at()
        )  # type: ignore[arg-type]
        assert not [e for e in events if isinstance(e, MemoryRetired)]
    with pytest.raises(Forbidden):
        decide_resolve_finding(
            ResolveFinding(finding_id=finding.id, decision="keep_a"), AGENT, finding, a, b, at()
        )
    with pytest.raises(NotFound):
        decide_resolve_finding(
            ResolveFinding(finding_id=finding.id, decision="keep_a"),
            ident("admin", namespace="acme/sales"),
            finding,
            a,
            b,
            at(),
        )
    with pytest.raises(InvalidState):
        decide_resolve_finding(
            ResolveFinding(finding_id=finding.id, decision="dismiss"),
            ADMIN,
            _finding(a, b, "resolved"),
            a,
            b,
            at(),
        )
    with pytest.raises(InvalidRequest):  # caller text the ledger could not store
        decide_resolve_finding(
            ResolveFinding(finding_id=finding.id, decision="dismiss", reason="a\x00b"),
            ADMIN,
            finding,
            a,
            b,
            at(),
        )


def test_overturning_writes_the_loser_again_superseding_the_winner() -> None:
    loser = memory(
        content="The cluster has 12 nodes", recorded_at=at(-2), status="retired", retired_at=at(-1)
    )
    winner = memory(content="The cluster has 16 nodes", recorded_at=at(-1))
    decision = DecisionState(
        id=uid(88),
        namespace=NS,
        winner=winner.id,
        loser=loser.id,
        judge="rules",
        rule="frame",
        explanation="x",
        dial="auto",
        settled_at=at(-1),
    )
    restored = uid(99)
    events = decide_overturn(
        OverturnDecision(decision_id=decision.id), ADMIN, decision, winner, loser, at(), restored
    )
    written = [e for e in events if isinstance(e, MemoryWritten)]
    assert [(w.memory_id, w.content, w.supersedes, w.reason) for w in written] == [
        (restored, loser.content, (loser.id, winner.id), "overturn")
    ]
    assert [(e.memory_id, e.by) for e in events if isinstance(e, MemorySuperseded)] == [(winner.id, restored)]
    assert isinstance(events[-1], SettlementOverturned)
    erased = memory(content=None, status="erased")
    with pytest.raises(InvalidState):
        decide_overturn(
            OverturnDecision(decision_id=decision.id), ADMIN, decision, winner, erased, at(), restored
        )
    with pytest.raises(InvalidRequest):
        decide_overturn(
            OverturnDecision(decision_id=decision.id, reason="  "),
            ADMIN,
            decision,
            winner,
            loser,
            at(),
            restored,
        )


def test_a_release_keeps_the_token_and_frees_the_lease_at_once() -> None:
    lease = Lease(
        id=uid(1), pass_name="autopilot", namespace=NS, holder="w", token=3, expires_at=at(1), version=7
    )
    freed = release(lease, at())
    assert (freed.token, freed.expires_at, freed.holder) == (3, at(), "w")
