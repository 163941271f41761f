"""An item in each review queue the autopilot and consolidation fill, made by the real
services on the test database: a finding (a contradiction the default dial leaves to a
person), an automatic decision (a namespace whose dial is ``auto``) and a consolidation
proposal (near-duplicates)."""

from __future__ import annotations

import time
from uuid import UUID

import msgspec

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import LeaseBusy
from memwarden.domain.model.policies import PolicyBody
from memwarden.projections.listing import ListQuery

TEAM = Identity(namespace="acme/eng", actor="bot", role="agent")
OPS = Identity(namespace="acme/ops", actor="opsbot", role="agent")
OPERATOR = Identity(namespace="acme", actor="operator@test", role="owner")
HOLDER = "review-seed"
DUPLICATE = "The staging cluster is rebuilt from the golden image every Sunday night"
REORDERED = "Every Sunday night the staging cluster is rebuilt from the golden image"
# Pairs the rules judge finds contradicting whose cosine (tests embed by feature hashing) is
# under the write's synchronous band (0.75) and over the autopilot's neighbours (0.6): the
# second write is stored whether or not the first is projected yet, and the autopilot's pass
# finds the pair. At the band's cosine the write could supersede, as soon as the first is read.
TEAM_CONTRADICTION = ("Payday is at noon", "Payday is at midnight")
OPS_CONTRADICTION = ("Backups run at noon", "Backups run at midnight")


class Seeded(msgspec.Struct, frozen=True, kw_only=True):
    finding: UUID
    decision: UUID
    proposal: UUID
    memories: tuple[UUID, ...]
    """Every memory written, in order."""


def _write(rt: Runtime, who: Identity, content: str) -> tuple[UUID, int]:
    command = WriteMemory(content=content, provenance=ProvenanceClaim(source="conversation"))
    result = rt.memory.write(who, command)
    assert result.outcome == "stored", result
    assert result.id is not None
    return result.id, result.position


def _judged(rt: Runtime, who: Identity, contents: tuple[str, str]) -> list[UUID]:
    """Write two contradicting facts and run the autopilot's pass over the newer."""
    first, _ = _write(rt, who, contents[0])
    second, position = _write(rt, who, contents[1])
    deadline = time.monotonic() + 60
    while True:  # a served process's own passes may hold the namespace's lease a moment
        try:
            rt.autopilot.judge_memory(second, position, HOLDER)
            break
        except LeaseBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    return [first, second]


def seed_review_queues(rt: Runtime) -> Seeded:
    rt.core.governance.set_policy(OPERATOR, OPS.namespace, PolicyBody(conflict_review="auto"))
    team = _judged(rt, TEAM, TEAM_CONTRADICTION)
    ops = _judged(rt, OPS, OPS_CONTRADICTION)
    duplicates = [_write(rt, TEAM, text) for text in (DUPLICATE, REORDERED)]
    drafted = rt.consolidation.consolidate(TEAM.namespace, duplicates[-1][1], HOLDER).drafted
    rt.reads.wait_for(rt.ledger.head_position())
    findings = rt.reads.findings(OPERATOR, ListQuery(status="open")).items
    decisions = rt.reads.decisions(OPERATOR, ListQuery(status="settled")).items
    assert [(f.memory_a, f.memory_b) for f in findings] == [tuple(team)], findings
    assert [(d.winner, d.loser) for d in decisions] == [(ops[1], ops[0])], decisions
    assert drafted, "no proposal drafted"
    return Seeded(
        finding=findings[0].id,
        decision=decisions[0].id,
        proposal=drafted[0],
        memories=(*team, *ops, *(m for m, _ in duplicates)),
    )
