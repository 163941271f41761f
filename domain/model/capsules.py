"""Working sets (``assemble``): which blocks get in, in which order, and what is signed.

Pure. The lanes fill in a fixed order: policy directives (capped at 35% of the budget,
but nothing is reserved for them), pins, recently used memories, then relevance to the
task hint. A block that does not fit is skipped, never cut, and the lanes after it may
still use the room. The output order is stable (lane, then the lane's own stable key),
so the same working set renders the same prompt and a prompt cache stays warm.

The receipt commits to the blocks: a Merkle root over their hashes (RFC 6962 style:
leaves and nodes hashed with different prefixes, an odd node promoted), plus the ledger
position the reads reflected; the service signs that message with ed25519.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID

import msgspec

Lane = Literal["directive", "pinned", "recent", "relevant"]
BlockKind = Literal["directive", "memory"]
LANES: tuple[Lane, ...] = ("directive", "pinned", "recent", "relevant")
DIRECTIVE_SHARE = 0.35
RELEVANCE_THRESHOLD = 0.05
RECEIPT_KIND = "memwarden-capsule-receipt-v1"


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """Something that could enter the working set. ``order`` is its stable sort key in
    its lane (never a score, which can drift between calls)."""

    ref: str
    kind: BlockKind
    lane: Lane
    content: str
    token_estimate: int
    score: float
    order: str


class Block(msgspec.Struct, frozen=True, kw_only=True):
    ref: str
    kind: BlockKind
    lane: Lane
    content: str
    token_estimate: int
    score: float


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """Why a candidate is in the capsule, or why not."""

    ref: str
    lane: Lane
    score: float
    threshold: float
    admitted: bool
    reason: str


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    blocks: list[Block]
    admission: list[Admission]
    tokens: int


def lane_threshold(lane: Lane) -> float:
    return RELEVANCE_THRESHOLD if lane == "relevant" else 0.0


def plan_capsule(candidates: Sequence[Candidate], budget: int) -> Plan:
    """Admit candidates lane by lane under ``budget`` tokens (see the module docstring)."""
    room = _Room(budget=budget, directive_cap=int(budget * DIRECTIVE_SHARE))
    admitted: list[Candidate] = []
    records: list[Admission] = []
    for lane in LANES:
        in_lane = [c for c in candidates if c.lane == lane]
        if lane == "relevant":
            in_lane.sort(key=lambda c: (-c.score, c.order))
        for c in in_lane:
            refusal = room.refusal(c)
            records.append(
                Admission(
                    ref=c.ref,
                    lane=c.lane,
                    score=c.score,
                    threshold=lane_threshold(lane),
                    admitted=refusal is None,
                    reason=refusal or "admitted",
                )
            )
            if refusal is None:
                room.take(c)
                admitted.append(c)
    ordered = sorted(admitted, key=lambda c: (LANES.index(c.lane), c.order))
    blocks = [
        Block(
            ref=c.ref,
            kind=c.kind,
            lane=c.lane,
            content=c.content,
            token_estimate=c.token_estimate,
            score=c.score,
        )
        for c in ordered
    ]
    return Plan(blocks=blocks, admission=records, tokens=room.used)


class _Room:
    """What is left of the budget, and what is already in."""

    def __init__(self, budget: int, directive_cap: int) -> None:
        self.budget = budget
        self.directive_cap = directive_cap
        self.used = 0
        self.directive_used = 0
        self.seen: set[str] = set()

    def refusal(self, c: Candidate) -> str | None:
        if c.ref in self.seen:
            return "already in an earlier lane"
        if c.score < lane_threshold(c.lane):
            return "below the lane's threshold"
        if self.used + c.token_estimate > self.budget:
            return "does not fit the budget (skipped, not cut)"
        if c.lane == "directive" and self.directive_used + c.token_estimate > self.directive_cap:
            return f"directives are capped at {DIRECTIVE_SHARE:.0%} of the budget"
        return None

    def take(self, c: Candidate) -> None:
        self.seen.add(c.ref)
        self.used += c.token_estimate
        if c.lane == "directive":
            self.directive_used += c.token_estimate


def block_hash(block: Block) -> bytes:
    """A block's leaf hash: its canonical JSON with a leaf prefix."""
    return hashlib.sha256(b"\x00" + msgspec.json.encode(block, order="sorted")).digest()


def merkle_root(leaves: Sequence[bytes]) -> str:
    """Hex Merkle root over leaf hashes; an odd node moves up unchanged; empty → sha256("")."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    level = list(leaves)
    while len(level) > 1:
        nxt = [
            hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0].hex()


def blocks_root(blocks: Sequence[Block]) -> str:
    return merkle_root([block_hash(b) for b in blocks])


class Receipt(msgspec.Struct, frozen=True, kw_only=True):
    capsule_id: UUID
    merkle_root: str
    position: int
    namespace: str
    actor: str
    issued_at: datetime
    key_id: str
    signature: str = ""


def receipt_message(receipt: Receipt) -> bytes:
    """The canonical bytes a receipt's signature covers: every field but the signature."""
    fields = msgspec.to_builtins(receipt)
    fields.pop("signature")
    fields["kind"] = RECEIPT_KIND
    fields["issued_at"] = receipt.issued_at.astimezone(UTC).isoformat()
    return msgspec.json.encode(fields, order="sorted")
