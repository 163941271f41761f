"""Deciders of the read side: capsule planning, Merkle roots, receipts, fault tiers. No I/O."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from uuid import UUID

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.model.capsules import (
    DIRECTIVE_SHARE,
    Block,
    Candidate,
    Receipt,
    block_hash,
    blocks_root,
    merkle_root,
    plan_capsule,
    receipt_message,
)
from memwarden.domain.model.faults import (
    L2_THRESHOLD,
    L3_THRESHOLD,
    absolute_score,
    decide_tier,
    ranked,
    saturate,
)


def cand(ref: str, lane: str, tokens: int, score: float = 1.0, order: str | None = None) -> Candidate:
    return Candidate(
        ref=ref,
        kind="directive" if lane == "directive" else "memory",
        lane=lane,  # type: ignore[arg-type]
        content=f"content of {ref}",
        token_estimate=tokens,
        score=score,
        order=order or ref,
    )


def test_lanes_fill_in_order_and_output_is_stable() -> None:
    candidates = [
        cand("r1", "relevant", 10, 0.9, order="2026-01-02"),
        cand("p1", "pinned", 10),
        cand("d1", "directive", 10),
        cand("c1", "recent", 10),
        cand("r2", "relevant", 10, 0.95, order="2026-01-01"),
    ]
    plan = plan_capsule(candidates, 100)
    assert [b.ref for b in plan.blocks] == ["d1", "p1", "c1", "r2", "r1"]
    assert plan.tokens == 50
    shuffled = plan_capsule(list(reversed(candidates)), 100)
    assert [b.ref for b in shuffled.blocks] == [b.ref for b in plan.blocks]


def test_directives_are_capped_but_not_reserved() -> None:
    budget = 100
    cap = int(budget * DIRECTIVE_SHARE)
    directives = [cand(f"d{i}", "directive", 20) for i in range(3)]
    plan = plan_capsule([*directives, cand("r", "relevant", 60, 0.5)], budget)
    admitted = [b.ref for b in plan.blocks]
    assert admitted.count("d0") == 1
    assert sum(b.token_estimate for b in plan.blocks if b.lane == "directive") <= cap
    assert "r" in admitted  # what directives did not use goes to the other lanes
    refused = [a for a in plan.admission if not a.admitted and a.lane == "directive"]
    assert refused
    assert "capped" in refused[0].reason


def test_a_block_that_does_not_fit_is_skipped_never_cut() -> None:
    plan = plan_capsule(
        [
            cand("big", "relevant", 80, 0.9),
            cand("small", "relevant", 15, 0.8),
            cand("tiny", "relevant", 5, 0.7),
        ],
        30,
    )
    assert [b.ref for b in plan.blocks] == ["small", "tiny"]
    big = next(a for a in plan.admission if a.ref == "big")
    assert not big.admitted
    assert "skipped" in big.reason
    assert all(b.content == f"content of {b.ref}" for b in plan.blocks)  # never shortened


def test_a_memory_enters_once_and_low_relevance_stays_out() -> None:
    plan = plan_capsule(
        [cand("m", "pinned", 5), cand("m", "relevant", 5, 0.9), cand("x", "relevant", 5, 0.01)], 100
    )
    assert [b.ref for b in plan.blocks] == ["m"]
    reasons = {(a.ref, a.lane): a.reason for a in plan.admission}
    assert reasons[("m", "relevant")] == "already in an earlier lane"
    assert "threshold" in reasons[("x", "relevant")]


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["directive", "pinned", "recent", "relevant"]),
            st.integers(min_value=1, max_value=60),
            st.floats(min_value=0, max_value=1),
        ),
        max_size=30,
    ),
    st.integers(min_value=1, max_value=300),
)
def test_a_capsule_never_exceeds_its_budget(items: list[tuple[str, int, float]], budget: int) -> None:
    plan = plan_capsule([cand(f"x{i}", lane, t, s) for i, (lane, t, s) in enumerate(items)], budget)
    assert sum(b.token_estimate for b in plan.blocks) <= budget
    assert sum(b.token_estimate for b in plan.blocks if b.lane == "directive") <= budget * DIRECTIVE_SHARE
    assert len(plan.admission) == len(items)


def _block(ref: str) -> Block:
    return Block(ref=ref, kind="memory", lane="relevant", content=ref * 3, token_estimate=1, score=0.5)


def test_merkle_root_known_values() -> None:
    assert merkle_root([]) == hashlib.sha256(b"").hexdigest()
    leaf = block_hash(_block("a"))
    assert merkle_root([leaf]) == leaf.hex()
    a, b, c = (block_hash(_block(x)) for x in "abc")
    ab = hashlib.sha256(b"\x01" + a + b).digest()
    assert merkle_root([a, b]) == ab.hex()
    assert merkle_root([a, b, c]) == hashlib.sha256(b"\x01" + ab + c).hexdigest()


@given(st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=12, unique=True), st.data())
def test_any_change_to_a_block_changes_the_root(refs: list[str], data: st.DataObject) -> None:
    blocks = [_block(r) for r in refs]
    root = blocks_root(blocks)
    i = data.draw(st.integers(min_value=0, max_value=len(blocks) - 1))
    changed = list(blocks)
    changed[i] = msgspec.structs.replace(blocks[i], content=blocks[i].content + "!")
    assert blocks_root(changed) != root
    if len(blocks) > 1:
        assert blocks_root(list(reversed(blocks))) != root or refs == list(reversed(refs))


def test_receipt_message_covers_every_field_but_the_signature() -> None:
    receipt = Receipt(
        capsule_id=UUID(int=1),
        merkle_root="ab" * 32,
        position=42,
        namespace="acme/eng",
        actor="bot",
        issued_at=datetime(2026, 1, 1, tzinfo=UTC),
        key_id="k1",
    )
    message = receipt_message(receipt)
    assert receipt_message(msgspec.structs.replace(receipt, signature="sig")) == message
    for change in ({"position": 43}, {"merkle_root": "cd" * 32}, {"actor": "other"}, {"namespace": "acme"}):
        assert receipt_message(msgspec.structs.replace(receipt, **change)) != message


def test_fault_scores_are_absolute_and_saturated() -> None:
    assert saturate(0.0) == 0.0
    assert saturate(2.0) == pytest.approx(0.5)
    assert saturate(1e9) < 1.0
    assert absolute_score(1.0, 1e9) == pytest.approx(1.0, abs=1e-6)
    assert absolute_score(-0.3, 0.0) == 0.0  # a negative cosine never subtracts
    assert absolute_score(0.5, 2.0) == pytest.approx(0.6 * 0.5 + 0.4 * 0.5)
    order = ranked({UUID(int=2): (0.5, 0.0), UUID(int=1): (0.5, 0.0), UUID(int=3): (0.9, 0.0)})
    assert [ref.int for ref, _ in order] == [3, 1, 2]


@pytest.mark.parametrize(
    ("l2", "l3", "tier"),
    [
        (L2_THRESHOLD, None, "L2"),
        (L2_THRESHOLD - 1e-9, L3_THRESHOLD, "L3"),
        (L2_THRESHOLD - 1e-9, L3_THRESHOLD - 1e-9, "miss"),
        (None, None, "miss"),
        (0.9, 0.9, "L2"),
        (None, L3_THRESHOLD, "L3"),
    ],
)
def test_fault_tiers_at_the_thresholds(l2: float | None, l3: float | None, tier: str) -> None:
    assert decide_tier(l2, l3) == tier
