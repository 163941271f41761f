"""The write decider settles the synchronous band's judged contradictions by the namespace's
``conflict_review`` dial, exactly as the autopilot settles a pass's (docs/architecture.md
section 4 step 7, section 5): pure, no I/O."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import pytest
from msgspec.structs import replace

from memwarden.domain.model.autopilot import decide_pass
from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.events import (
    ConflictReview,
    ConflictSettled,
    DisputeOpened,
    FindingOpened,
    MemorySuperseded,
    MemoryWritten,
)
from memwarden.domain.model.judging import Judgement
from memwarden.domain.model.memory import MemoryState, evolve_memory
from memwarden.domain.model.settling import Pair, settlement
from memwarden.domain.model.trust import source_rank
from memwarden.domain.model.write import WriteDecision, decide_write
from tests.unit.builders import AGENT, DISPUTE_ID, NEW_ID, T0, at, cmd, memory, of_type, uid, write_state

OLD = "The staging deploy window opens at 10:00"
NEW = "The staging deploy window opens at 14:00"
FRAME = Judgement(verdict="contradiction", rule="frame", explanation="the same frame, another time")


def pair(neighbour: MemoryState, cosine: float = 0.9) -> Pair:
    return Pair(neighbour=neighbour, cosine=cosine, judgement=FRAME)


def ids() -> Iterator[UUID]:
    return iter([UUID(int=300), UUID(int=301), UUID(int=302)])


def banded(
    dial: ConflictReview,
    old: MemoryState,
    source: str = "conversation",
    *,
    judged: tuple[Pair, ...] | None = None,
) -> WriteDecision:
    state = replace(
        write_state(),
        holders={old.id: old},
        judged=(pair(old),) if judged is None else judged,
        band_judged=(old.id,),
        judge="rules",
    )
    policy = WritePolicy(conflict_review=dial)
    return decide_write(cmd(NEW, source=source), AGENT, state, policy, T0, NEW_ID, DISPUTE_ID, ids())


def old_memory(source: str = "conversation", **fields: object) -> MemoryState:
    return memory(content=OLD, source=source, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dial", "new", "old", "expected"),
    [
        ("auto", "conversation", "conversation", "newer"),
        ("auto", "document", "conversation", "newer"),
        ("auto", "conversation", "document", "older"),
        ("lower_trust", "document", "conversation", "newer"),
        ("lower_trust", "conversation", "conversation", "finding"),
        ("lower_trust", "conversation", "document", "finding"),
        ("all", "document", "conversation", "finding"),
        ("all", "conversation", "conversation", "finding"),
    ],
)
def test_the_dial_settles_a_pair(dial: ConflictReview, new: str, old: str, expected: str) -> None:
    assert settlement(dial, source_rank(new), old_memory(old), same_namespace=True) == expected


@pytest.mark.parametrize("dial", ["auto", "lower_trust", "all"])
def test_a_neighbour_of_another_namespace_is_always_a_finding(dial: ConflictReview) -> None:
    assert settlement(dial, source_rank("manual"), old_memory(), same_namespace=False) == "finding"


def test_under_auto_an_equal_rank_new_fact_supersedes_as_a_decision() -> None:
    old = old_memory()
    decision = banded("auto", old)
    assert decision.outcome == "superseded"
    assert decision.supersedes == (old.id,)
    assert decision.findings == ()
    (settled,) = of_type(decision.events, ConflictSettled)
    assert decision.decisions == (settled.decision_id,)
    assert (settled.winner, settled.loser, settled.dial, settled.rule, settled.judge) == (
        NEW_ID,
        old.id,
        "auto",
        "frame",
        "rules",
    )
    assert settled.explanation == FRAME.explanation
    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert (superseded.memory_id, superseded.by, superseded.reason) == (old.id, NEW_ID, "judged")


def test_under_auto_a_lower_rank_new_fact_is_quarantined_as_step_6_does() -> None:
    old = old_memory("document")
    decision = banded("auto", old)
    assert decision.outcome == "disputed"
    assert (decision.findings, decision.decisions) == ((), ())
    (opened,) = of_type(decision.events, DisputeOpened)
    assert opened.incumbent_id == old.id
    assert opened.reason.startswith("judged")


@pytest.mark.parametrize("old_source", ["conversation", "document"])
def test_under_lower_trust_an_equal_or_lower_rank_fact_is_stored_with_a_finding(old_source: str) -> None:
    old = old_memory(old_source)
    decision = banded("lower_trust", old)
    assert decision.outcome == "stored"
    assert (decision.supersedes, decision.decisions) == ((), ())
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.status == "active"
    (finding,) = of_type(decision.events, FindingOpened)
    assert decision.findings == (finding.finding_id,)
    assert (finding.memory_a, finding.memory_b, finding.rule, finding.cosine, finding.namespace) == (
        old.id,
        NEW_ID,
        "frame",
        0.9,
        AGENT.namespace,
    )
    assert not of_type(decision.events, MemorySuperseded)


def test_under_lower_trust_a_higher_rank_fact_settles_automatically() -> None:
    decision = banded("lower_trust", old_memory(), "document")
    assert decision.outcome == "superseded"
    assert len(decision.decisions) == 1
    assert decision.findings == ()


@pytest.mark.parametrize("source", ["conversation", "document"])
def test_under_all_every_contradiction_is_a_finding(source: str) -> None:
    decision = banded("all", old_memory(), source)
    assert decision.outcome == "stored"
    assert decision.decisions == ()
    assert len(decision.findings) == 1


def test_the_band_settles_as_the_autopilot_does() -> None:
    """The same pair, judged at write time or by the pass of the new memory, ends the same:
    the same winner and loser, or a finding between the same two memories."""
    for dial in ("auto", "lower_trust", "all"):
        for source in ("conversation", "document"):
            old = old_memory()
            decision = banded(dial, old, source)  # type: ignore[arg-type]
            written = of_type(decision.events, MemoryWritten)[0]
            new = evolve_memory(None, replace(written, band_judged=()))
            passed = decide_pass(new, [pair(old)], dial, "rules", 1, T0, ids())  # type: ignore[arg-type]
            assert _outcome(decision.events) == _outcome(passed), (dial, source)


def _outcome(events: object) -> tuple[object, ...]:
    return (
        tuple((e.winner, e.loser, e.dial, e.rule) for e in of_type(events, ConflictSettled)),  # type: ignore[arg-type]
        tuple((e.memory_a, e.memory_b, e.rule) for e in of_type(events, FindingOpened)),  # type: ignore[arg-type]
    )


def test_the_written_memory_records_every_neighbour_the_band_judged() -> None:
    old = old_memory()
    state = replace(write_state(), band_judged=(old.id, uid(7)), judge="rules")
    decision = decide_write(cmd(NEW), AGENT, state, WritePolicy(), T0, NEW_ID, DISPUTE_ID)
    assert decision.outcome == "stored"
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.band_judged == (old.id, uid(7))
    assert evolve_memory(None, written).band_judged == (old.id, uid(7))


@pytest.mark.parametrize(
    "fields",
    [{"namespace": "acme"}, {"retired_at": at(-1), "status": "retired"}],
)
def test_a_neighbour_outside_the_namespace_or_no_longer_current_is_left_alone(
    fields: dict[str, object],
) -> None:
    old = old_memory(**fields)
    decision = banded("auto", old)
    assert decision.outcome == "stored"
    assert (decision.findings, decision.decisions, decision.supersedes) == ((), (), ())


def test_a_contradiction_without_ids_for_its_finding_is_refused() -> None:
    old = old_memory()
    state = replace(write_state(), holders={old.id: old}, judged=(pair(old),), judge="rules")
    with pytest.raises(ValueError, match="review_ids"):
        decide_write(cmd(NEW), AGENT, state, WritePolicy(), T0, NEW_ID, DISPUTE_ID)
