"""Findings are grouped by their newer statement (domain/model/autopilot.py ``finding_group``):
a statement that contradicts several older ones, as one bad import line does, gives a reviewer
one group, however many pairs it made. On real PostgreSQL, through the autopilot's passes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from uuid import UUID

import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.autopilot import ResolveFinding
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings

AGENT = Identity(namespace="acme/eng/platform", actor="importer", role="agent")
REVIEWER = Identity(namespace="acme/eng", actor="rev", role="admin")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        rt.memory.band = None  # the autopilot's passes find every pair here
        yield rt


def _write_and_judge(rt: Runtime, content: str) -> tuple[UUID, int]:
    result = rt.memory.write(
        AGENT, WriteMemory(content=content, provenance=ProvenanceClaim(source="swap-import"))
    )
    assert result.outcome == "stored", result
    assert result.id is not None
    judged = rt.autopilot.judge_memory(result.id, result.position, "worker-1")
    return result.id, judged.position or result.position


def test_the_findings_about_one_statement_share_its_group(runtime: Runtime) -> None:
    ids: list[UUID] = []
    position = 0
    for limit in (10, 20, 30, 50):  # an import of four values for one limit
        memory_id, position = _write_and_judge(runtime, f"The upload limit for attachments is {limit} MB")
        ids.append(memory_id)
    findings = runtime.reads.findings(REVIEWER, after=position).items
    assert len(findings) == 6  # every pair once: 1 + 2 + 3
    assert all(f.group_id == f.memory_b for f in findings)
    groups = Counter(f.group_id for f in findings)
    assert groups == {ids[1]: 1, ids[2]: 2, ids[3]: 3}  # one group per newer statement
    newest = [f for f in findings if f.group_id == ids[3]]
    assert {f.memory_a for f in newest} == set(ids[:3])

    resolved = runtime.autopilot.resolve_finding(
        REVIEWER, ResolveFinding(finding_id=newest[0].id, decision="both_valid")
    )
    assert resolved.finding.group_id == ids[3]
    still_open = runtime.reads.findings(REVIEWER, after=resolved.position).items
    assert Counter(f.group_id for f in still_open)[ids[3]] == 2
