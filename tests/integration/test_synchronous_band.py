"""The synchronous band of a write (docs/architecture.md section 4, step 7), on real PostgreSQL,
pgvector and the offline embedder: an unslotted fact that the judge finds contradicting an
own-namespace neighbour (cosine >= 0.75) is settled inside the write by the namespace's
``conflict_review`` dial, exactly as the autopilot would settle it: under ``auto`` as a slot
conflict is, under ``lower_trust`` automatically only when the new fact outranks the old
(else a finding), under ``all`` always a finding. A finding opens in the write's own
append and the result names it; an automatic settlement is a decision a reviewer may
overturn."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import msgspec
import numpy as np
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.autopilot import OverturnDecision, ResolveFinding
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.events import ConflictSettled, Event, FindingOpened, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.model.write import Outcome
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import Settings

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent", max_provenance="document")
OTHER_AGENT = Identity(namespace="acme/eng/platform", actor="bot2", role="agent", max_provenance="document")
ORG = Identity(namespace="acme", actor="bot", role="agent", max_provenance="document")
REVIEWER = Identity(namespace="acme/eng", actor="rev", role="admin")
ROOT = Identity(namespace="acme", actor="root", role="owner")
OLD = "The staging deploy window opens at 10:00 every weekday"
NEW = "The staging deploy window opens at 14:00 every weekday"


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def set_dial(rt: Runtime, dial: str) -> None:
    rt.core.governance.set_policy(ROOT, AGENT.namespace, PolicyBody(conflict_review=dial))  # type: ignore[arg-type]


def write(
    rt: Runtime, identity: Identity, content: str, source: str = "conversation", **slot: str
) -> WriteResult:
    command = WriteMemory(content=content, provenance=ProvenanceClaim(source=source), **slot)  # type: ignore[arg-type]
    result = rt.memory.write(identity, command)
    rt.reads.wait_for(result.position)  # the index holds it before the next write looks
    return result


def outcome(result: WriteResult) -> Outcome:
    return result.outcome


def cosine(rt: Runtime, a: str, b: str) -> float:
    embedder = rt.memory.embedder
    assert embedder is not None
    rows = np.asarray(embedder.embed([a, b]))
    return float(rows[0] @ rows[1])


def appended_by(rt: Runtime, before: int, result: WriteResult) -> list[Event]:
    """The events of the write's own append (nothing else writes in these tests)."""
    return [r.event for r in rt.ledger.read(before, 1_000, stop=result.position)]


def current(rt: Runtime, memory_id: UUID | None) -> bool:
    assert memory_id is not None
    state = rt.memory.memory(memory_id)
    assert state is not None
    return state.is_current(rt.memory.clock())


def test_the_pair_is_a_same_frame_contradiction_at_band_cosine(runtime: Runtime) -> None:
    assert cosine(runtime, OLD, NEW) >= 0.75


def test_under_auto_an_equal_rank_contradiction_is_superseded_as_an_overturnable_decision(
    runtime: Runtime,
) -> None:
    set_dial(runtime, "auto")
    old = write(runtime, AGENT, OLD)
    before = runtime.ledger.head_position()
    new = write(runtime, OTHER_AGENT, NEW)
    assert outcome(new) == "superseded", new
    assert new.supersedes == (old.id,)
    assert new.findings == ()
    assert len(new.decisions) == 1
    assert not current(runtime, old.id)
    settled = [e for e in appended_by(runtime, before, new) if isinstance(e, ConflictSettled)]
    assert [(e.decision_id, e.winner, e.loser, e.dial, e.rule) for e in settled] == [
        (new.decisions[0], new.id, old.id, "auto", "frame")
    ]
    assert settled[0].explanation
    listed = runtime.reads.decisions(REVIEWER, after=new.position).items
    assert [(d.id, d.winner, d.loser, d.status) for d in listed] == [
        (new.decisions[0], new.id, old.id, "settled")
    ]
    overturned = runtime.autopilot.overturn(
        REVIEWER, OverturnDecision(decision_id=new.decisions[0], reason="the old window holds")
    )
    assert overturned.decision.status == "overturned"
    assert not current(runtime, new.id)
    assert current(runtime, overturned.decision.restored)


def test_under_auto_a_lower_rank_contradiction_is_quarantined_as_a_dispute(runtime: Runtime) -> None:
    set_dial(runtime, "auto")
    old = write(runtime, AGENT, OLD, source="document")
    new = write(runtime, AGENT, NEW)
    assert outcome(new) == "disputed", new
    assert new.dispute_id is not None
    assert (new.findings, new.decisions) == ((), ())
    dispute = runtime.memory.dispute(new.dispute_id)
    assert dispute is not None
    assert dispute.incumbent_id == old.id
    assert "judged" in dispute.reason


@pytest.mark.parametrize("source", ["conversation", "live-fetch"])
def test_under_lower_trust_an_equal_or_lower_rank_fact_is_stored_with_a_finding_in_its_append(
    runtime: Runtime, source: str
) -> None:
    """The default dial: no judged contradiction retires a fact of equal or higher rank
    silently. The new fact is stored, and the finding opens in the same append."""
    old = write(runtime, AGENT, OLD, source="document")
    before = runtime.ledger.head_position()
    new = write(runtime, OTHER_AGENT, NEW, source=source)
    assert outcome(new) == "stored", new
    assert (new.supersedes, new.decisions) == ((), ())
    assert len(new.findings) == 1
    assert current(runtime, old.id)
    assert current(runtime, new.id)
    events = appended_by(runtime, before, new)
    assert any(isinstance(e, MemoryWritten) and e.memory_id == new.id for e in events)
    opened = [e for e in events if isinstance(e, FindingOpened)]
    assert [(e.finding_id, e.memory_a, e.memory_b, e.rule) for e in opened] == [
        (new.findings[0], old.id, new.id, "frame")
    ]
    assert opened[0].cosine >= 0.75
    listed = runtime.reads.findings(REVIEWER, after=new.position).items
    assert [f.id for f in listed] == [new.findings[0]]
    resolved = runtime.autopilot.resolve_finding(
        REVIEWER, ResolveFinding(finding_id=new.findings[0], decision="keep_b")
    )
    assert resolved.finding.status == "resolved"
    assert not current(runtime, old.id)


def test_under_lower_trust_a_higher_rank_fact_settles_as_a_decision(runtime: Runtime) -> None:
    old = write(runtime, AGENT, OLD)
    new = write(runtime, OTHER_AGENT, NEW, source="document")
    assert outcome(new) == "superseded", new
    assert new.findings == ()
    assert len(new.decisions) == 1
    assert not current(runtime, old.id)
    (decision,) = runtime.reads.decisions(REVIEWER, after=new.position).items
    assert (decision.id, decision.dial, decision.rule) == (new.decisions[0], "lower_trust", "frame")


@pytest.mark.parametrize("source", ["conversation", "document"])
def test_under_all_every_contradiction_is_a_finding(runtime: Runtime, source: str) -> None:
    set_dial(runtime, "all")
    old = write(runtime, AGENT, OLD)
    new = write(runtime, OTHER_AGENT, NEW, source=source)
    assert outcome(new) == "stored", new
    assert new.decisions == ()
    assert len(new.findings) == 1
    assert current(runtime, old.id)
    (finding,) = runtime.reads.findings(REVIEWER, after=new.position).items
    assert (finding.id, finding.memory_a, finding.memory_b) == (new.findings[0], old.id, new.id)


def test_the_autopilot_does_not_judge_again_what_the_band_judged(runtime: Runtime) -> None:
    old = write(runtime, AGENT, OLD)
    new = write(runtime, OTHER_AGENT, NEW)
    assert len(new.findings) == 1
    assert new.id is not None
    result = runtime.autopilot.judge_memory(new.id, new.position, "w")
    assert (result.outcome, result.pairs, result.findings) == ("judged", 0, 0)
    assert [f.id for f in runtime.reads.findings(REVIEWER, after=result.position).items] == list(new.findings)
    assert old.id is not None


def test_a_paraphrase_and_another_subject_are_stored(runtime: Runtime) -> None:
    write(runtime, AGENT, "The rotation of team 1 changes on Tuesday")
    other = write(runtime, AGENT, "The rotation of team 2 changes on Tuesday")
    assert (outcome(other), other.findings) == ("stored", ())
    write(runtime, AGENT, OLD)
    paraphrase = write(runtime, AGENT, "Every weekday the staging deploy window opens at 10:00")
    assert (outcome(paraphrase), paraphrase.findings) == ("stored", ())


def test_an_ancestor_fact_is_never_settled_by_a_write(runtime: Runtime) -> None:
    set_dial(runtime, "auto")
    org = write(runtime, ORG, OLD)
    new = write(runtime, AGENT, NEW)
    assert outcome(new) == "stored"  # the autopilot makes it a finding; the write closes nothing
    assert (new.findings, new.decisions) == ((), ())
    assert current(runtime, org.id)


def test_a_slotted_write_is_settled_by_its_slot_only(runtime: Runtime) -> None:
    write(runtime, AGENT, OLD)
    slotted = write(runtime, AGENT, NEW, subject="staging deploy window", attribute="opens", value="14:00")
    assert outcome(slotted) == "stored"
    assert slotted.findings == ()


def test_without_a_judge_there_is_no_band(settings: Settings) -> None:
    with Runtime(msgspec.structs.replace(settings, judge="none")) as runtime:
        assert runtime.memory.band is None
        write(runtime, AGENT, OLD)
        assert outcome(write(runtime, AGENT, NEW)) == "stored"
