"""The synchronous band of a write (docs/architecture.md section 4, step 7), on real PostgreSQL,
pgvector and the offline embedder: an unslotted fact that the judge finds contradicting an
own-namespace neighbour (cosine >= 0.75) is settled inside the write, as a slot conflict is."""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.write import Outcome
from memwarden.domain.services.memory import WriteResult
from memwarden.domain.settings import Settings

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent", max_provenance="document")
ORG = Identity(namespace="acme", actor="bot", role="agent", max_provenance="document")
OLD = "The staging deploy window opens at 10:00 every weekday"
NEW = "The staging deploy window opens at 14:00 every weekday"


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def write(
    rt: Runtime, identity: Identity, content: str, source: str = "conversation", **slot: str
) -> WriteResult:
    command = WriteMemory(content=content, provenance=ProvenanceClaim(source=source), **slot)  # type: ignore[arg-type]
    result = rt.memory.write(identity, command)
    rt.reads.wait_for(result.position)  # the index holds it before the next write looks
    return result


def outcome(result: WriteResult) -> Outcome:
    return result.outcome


def test_an_equal_rank_contradiction_is_superseded_inside_the_write(runtime: Runtime) -> None:
    old = write(runtime, AGENT, OLD)
    new = write(runtime, AGENT, NEW)
    assert outcome(new) == "superseded", new
    assert new.supersedes == (old.id,)
    assert old.id is not None
    state = runtime.memory.memory(old.id)
    assert state is not None
    assert not state.is_current(runtime.memory.clock())
    assert state.superseded_by == (new.id,)


def test_a_lower_rank_contradiction_is_quarantined_as_a_dispute(runtime: Runtime) -> None:
    old = write(runtime, AGENT, OLD, source="document")
    new = write(runtime, AGENT, NEW)
    assert outcome(new) == "disputed", new
    assert new.dispute_id is not None
    dispute = runtime.memory.dispute(new.dispute_id)
    assert dispute is not None
    assert dispute.incumbent_id == old.id
    assert "judged" in dispute.reason


def test_a_paraphrase_and_another_subject_are_stored(runtime: Runtime) -> None:
    write(runtime, AGENT, "The rotation of team 1 changes on Tuesday")
    assert outcome(write(runtime, AGENT, "The rotation of team 2 changes on Tuesday")) == "stored"
    write(runtime, AGENT, OLD)
    assert (
        outcome(write(runtime, AGENT, "Every weekday the staging deploy window opens at 10:00")) == "stored"
    )


def test_an_ancestor_fact_is_never_settled_by_a_write(runtime: Runtime) -> None:
    org = write(runtime, ORG, OLD)
    new = write(runtime, AGENT, NEW)
    assert outcome(new) == "stored"  # the autopilot makes it a finding; the write closes nothing
    assert org.id is not None
    state = runtime.memory.memory(org.id)
    assert state is not None
    assert state.is_current(runtime.memory.clock())


def test_a_slotted_write_is_settled_by_its_slot_only(runtime: Runtime) -> None:
    write(runtime, AGENT, OLD)
    slotted = write(runtime, AGENT, NEW, subject="staging deploy window", attribute="opens", value="14:00")
    assert outcome(slotted) == "stored"


def test_without_a_judge_there_is_no_band(settings: Settings) -> None:
    with Runtime(msgspec.structs.replace(settings, judge="none")) as runtime:
        assert runtime.memory.band is None
        write(runtime, AGENT, OLD)
        assert outcome(write(runtime, AGENT, NEW)) == "stored"
