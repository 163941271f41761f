"""assemble and fault on real PostgreSQL + pgvector with the real embedder: lanes, signed
receipts re-derived and verified, telemetry from the ledger, fault tiers, scope."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.capsules import block_hash, merkle_root, receipt_message
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import AuditRecorded, CapsuleIssued, ContextFaulted, Directive
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.settings import Settings
from tests.unit.builders import EXPENSE_POLICY

AGENT = Identity(namespace="acme/eng/alpha", actor="bot", role="agent")
SIBLING = Identity(namespace="acme/eng/beta", actor="bot", role="agent")
ADMIN = Identity(namespace="acme", actor="root", role="admin")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def write(rt: Runtime, who: Identity, content: str) -> uuid.UUID:
    result = rt.memory.write(who, WriteMemory(content=content))
    assert result.id is not None, result
    return result.id


def head(rt: Runtime) -> int:
    return rt.ledger.head_position()


def test_a_capsule_fills_its_lanes_and_its_receipt_verifies(runtime: Runtime) -> None:
    runtime.core.governance.set_policy(
        ADMIN,
        "acme",
        PolicyBody(directives=(Directive(id="tone", text="Answer briefly and cite memory ids."),)),
    )
    pinned = write(runtime, AGENT, "The incident channel is #inc-alpha.")
    runtime.core.governance.pin(AGENT, pinned, visible=True, pinned=True)
    relevant = write(runtime, AGENT, "Deploys to production need two approvals.")
    write(runtime, AGENT, "The team lunch is on Fridays.")
    hidden = write(runtime, SIBLING, "Deploys to production for beta need three approvals.")

    capsule = runtime.working_sets.assemble(AGENT, 200, "how do deploys get approved?", after=head(runtime))
    lanes = [(b.lane, b.ref) for b in capsule.blocks]
    assert lanes[0] == ("directive", "directive:acme:tone")
    assert ("pinned", str(pinned)) in lanes
    assert ("relevant", str(relevant)) in lanes
    assert str(hidden) not in {b.ref for b in capsule.blocks}
    assert [lane for lane, _ in lanes] == sorted(
        (lane for lane, _ in lanes), key=["directive", "pinned", "recent", "relevant"].index
    )
    assert sum(b.token_estimate for b in capsule.blocks) <= 200
    assert {a.ref for a in capsule.admission if a.admitted} == {b.ref for b in capsule.blocks}

    # re-derive the root from the blocks and check the signature with the ledger's public key
    receipt = capsule.receipt
    assert merkle_root([block_hash(b) for b in capsule.blocks]) == receipt.merkle_root
    public = runtime.ledger.checkpoints.public_keys()[receipt.key_id]
    Ed25519PublicKey.from_public_bytes(public).verify(
        base64.b64decode(receipt.signature), receipt_message(receipt)
    )
    assert receipt.position <= head(runtime)
    assert runtime.working_sets.verify_capsule(capsule) is None

    # the ledger recorded the capsule's ids and root
    issued = runtime.ledger.streams([receipt.capsule_id])[receipt.capsule_id][0].event
    assert isinstance(issued, CapsuleIssued)
    assert issued.merkle_root == receipt.merkle_root
    assert set(issued.refs) == {uuid.UUID(b.ref) for b in capsule.blocks if b.kind == "memory"}

    # any change to a block, the root or the signature is caught
    tampered = msgspec.structs.replace(
        capsule, blocks=[msgspec.structs.replace(capsule.blocks[-1], content="Deploys need no approval.")]
    )
    assert runtime.working_sets.verify_capsule(tampered) is not None
    forged = msgspec.structs.replace(
        capsule, receipt=msgspec.structs.replace(receipt, position=receipt.position + 1)
    )
    assert runtime.working_sets.verify_capsule(forged) is not None


def test_output_order_is_stable_and_telemetry_comes_from_capsules(runtime: Runtime) -> None:
    ids = [
        write(runtime, AGENT, f"Runbook step {n}: check the deploy dashboard for region {n}.")
        for n in range(4)
    ]
    first = runtime.working_sets.assemble(AGENT, 500, "deploy dashboard runbook", after=head(runtime))
    second = runtime.working_sets.assemble(AGENT, 500, "deploy dashboard runbook", after=head(runtime))
    assert [b.ref for b in second.blocks] == sorted(
        (b.ref for b in second.blocks), key=[b.ref for b in second.blocks].index
    )
    assert {b.ref for b in first.blocks} == {b.ref for b in second.blocks}
    assert [b.lane for b in second.blocks] == ["recent"] * len(second.blocks)  # used before → recent lane
    third = runtime.working_sets.assemble(AGENT, 500, "deploy dashboard runbook", after=head(runtime))
    assert [b.ref for b in third.blocks] == [b.ref for b in second.blocks]  # same inputs, same prompt
    runtime.reads.wait_for(head(runtime))
    with runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            SQL("SELECT memory_id, use_count, last_used FROM {}.memory_access").format(
                Identifier(runtime.ledger.schema)
            )
        ).fetchall()
    counts = {r["memory_id"]: r["use_count"] for r in rows}
    assert {counts.get(i) for i in ids} == {3}


def test_directives_take_at_most_35_percent(runtime: Runtime) -> None:
    long_rule = "Always follow the change-management procedure. " * 6
    runtime.core.governance.set_policy(
        ADMIN,
        "acme",
        PolicyBody(directives=(Directive(id="a", text=long_rule), Directive(id="b", text="Be kind."))),
    )
    write(runtime, AGENT, "Change freeze starts on December 20.")
    capsule = runtime.working_sets.assemble(AGENT, 100, "change freeze", after=head(runtime))
    directive_tokens = sum(b.token_estimate for b in capsule.blocks if b.lane == "directive")
    assert directive_tokens <= 35
    assert [b.ref for b in capsule.blocks if b.lane == "directive"] == ["directive:acme:b"]
    skipped = next(a for a in capsule.admission if a.ref == "directive:acme:a")
    assert not skipped.admitted
    assert any(b.lane == "relevant" for b in capsule.blocks)


def test_assemble_refuses_bad_budgets_and_audits_them(runtime: Runtime) -> None:
    for budget in (0, -5, 10_000_000):
        with pytest.raises(InvalidRequest):
            runtime.working_sets.assemble(AGENT, budget)
    records = [r.event for r in runtime.ledger.read(0, 100) if isinstance(r.event, AuditRecorded)]
    assert [(r.op, r.outcome) for r in records] == [("assemble", "denied")] * 3


KNOWLEDGE = EXPENSE_POLICY


def publish(rt: Runtime, namespace: str, text: str = KNOWLEDGE) -> None:
    service = KnowledgeService(rt.ledger, rt.core.embedder, rt.core.governance.write_policy)
    result = service.publish(Identity(namespace=namespace, actor="docs", role="admin"), text, "expenses.md")
    assert result.outcome == "published", result


def fault_events(rt: Runtime) -> list[ContextFaulted]:
    return [r.event for r in rt.ledger.read(0, 10_000) if isinstance(r.event, ContextFaulted)]


def test_fault_tiers_l2_then_l3_then_miss(runtime: Runtime) -> None:
    fact = write(runtime, AGENT, "The staging database is restored from backup every Sunday night.")
    publish(runtime, "acme/eng")

    l2 = runtime.working_sets.fault(
        AGENT, "When is the staging database restored from backup?", after=head(runtime)
    )
    assert l2.hit
    assert l2.source == "L2"
    assert l2.blocks[0].ref == fact
    assert l2.score >= 0.35

    l3 = runtime.working_sets.fault(
        AGENT, "What is the hotel limit for travel expenses?", after=head(runtime)
    )
    assert l3.hit
    assert l3.source == "L3"
    assert l3.blocks[0].kind == "knowledge"
    assert "180 euros" in l3.blocks[0].content
    assert 0.15 <= l3.score < 1

    miss = runtime.working_sets.fault(
        AGENT, "Who won the chess tournament in Reykjavik?", after=head(runtime)
    )
    assert not miss.hit
    assert miss.source is None
    assert miss.blocks == []
    assert miss.score < 0.15

    tiers = [(e.tier, e.best_candidate) for e in fault_events(runtime)]
    assert [t for t, _ in tiers] == ["L2", "L3", "miss"]
    audit = [
        r.event
        for r in runtime.ledger.read(0, 10_000)
        if isinstance(r.event, AuditRecorded) and r.event.op == "fault"
    ]
    assert [(a.outcome, a.detail.split()[0]) for a in audit] == [
        ("ok", "tier=L2"),
        ("ok", "tier=L3"),
        ("miss", "tier=miss"),
    ]

    # a miss and an L3 answer count against the best L2 candidate (here the one memory)
    runtime.reads.wait_for(head(runtime))
    with runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            SQL("SELECT fault_count FROM {}.memory_access WHERE memory_id = %s").format(
                Identifier(runtime.ledger.schema)
            ),
            (fact,),
        ).fetchone()
    assert row is not None
    assert row["fault_count"] == 2


def test_fault_stays_inside_the_scope(runtime: Runtime) -> None:
    write(runtime, SIBLING, "The staging database is restored from backup every Sunday night.")
    publish(runtime, "acme/sales")
    answer = runtime.working_sets.fault(
        AGENT, "When is the staging database restored from backup?", after=head(runtime)
    )
    assert not answer.hit
    assert answer.blocks == []
    other = runtime.working_sets.fault(
        AGENT, "What is the hotel limit for travel expenses?", after=head(runtime)
    )
    assert not other.hit


def test_fault_refuses_an_empty_question(runtime: Runtime) -> None:
    with pytest.raises(InvalidRequest):
        runtime.working_sets.fault(AGENT, "   ")


def test_stats_report_the_fault_hit_rate(runtime: Runtime) -> None:
    write(runtime, AGENT, "The VPN config lives in the ops wiki.")
    runtime.working_sets.fault(AGENT, "Where is the VPN config?", after=head(runtime))
    runtime.working_sets.fault(AGENT, "Who won the chess tournament in Reykjavik?", after=head(runtime))
    counts: Any = runtime.reads.counts(AGENT, after=head(runtime))
    assert counts.fault_hit_rate == pytest.approx(0.5)
