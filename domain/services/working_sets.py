"""``assemble`` and ``fault``: working sets with signed receipts, and the question a
working set could not answer. Both read through the caller's scoped view (the
``WorkingSetReads`` port, which the search index implements) and put what the agent saw
on the ledger through the command runner (one append with the audit record)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.embedding import EmbedderUnavailable
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.checkpoints import InvalidCheckpoint, verify_signature
from memwarden.domain.model.capsules import (
    Admission,
    Block,
    Candidate,
    Lane,
    Receipt,
    blocks_root,
    plan_capsule,
    receipt_message,
)
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import CapsuleIssued, ContextFaulted
from memwarden.domain.model.faults import L2_THRESHOLD, L3_THRESHOLD, Tier, decide_tier, ranked
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import EffectivePolicy
from memwarden.domain.model.text import estimate_tokens
from memwarden.domain.ports import MemoryText, ScopedReads, WorkingSetReads
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry

MAX_BUDGET = 200_000
MAX_HINT_CHARS = 2_000
RECENT_CANDIDATES = 20
RELEVANT_CANDIDATES = 20
FAULT_CANDIDATES = 20
FAULT_BLOCKS = 5
ISSUED = Retry("the capsule could not be recorded; retry", attempts=1)
"""A capsule or a fault is a new stream: nothing to conflict with."""
T = TypeVar("T")


class Capsule(msgspec.Struct, frozen=True, kw_only=True):
    blocks: list[Block]
    admission: list[Admission]
    receipt: Receipt


class FaultBlock(msgspec.Struct, frozen=True, kw_only=True):
    ref: UUID
    kind: str
    content: str
    score: float
    title: str | None = None


class FaultAnswer(msgspec.Struct, frozen=True, kw_only=True):
    hit: bool
    source: str | None
    blocks: list[FaultBlock]
    latency_ms: float
    score: float
    degraded: bool = False
    position: int = 0


class _Tiers(msgspec.Struct, frozen=True):
    """What a fault found: the tier that answers, its best score, the best memory, the blocks."""

    tier: Tier
    score: float
    best: UUID | None
    blocks: list[FaultBlock]


class WorkingSetService:
    """``assemble`` and ``fault`` for one process."""

    def __init__(
        self,
        runner: CommandRunner,
        reads: WorkingSetReads,
        policy_of: Callable[[str], EffectivePolicy],
    ) -> None:
        self.runner = runner
        self.reads = reads
        self.policy_of = policy_of

    @property
    def ledger(self) -> Ledger:
        """The runner's ledger, whose key signs receipts and whose checkpoints they cite: the
        PostgreSQL ledger (an in-memory one, behind the same port, has neither)."""
        ledger = self.runner.ledger
        if not isinstance(ledger, Ledger):
            raise TypeError("working sets need the PostgreSQL ledger: its signing key and checkpoints")
        return ledger

    # -- assemble -------------------------------------------------------------------------------

    def assemble(
        self, identity: Identity, budget_tokens: int, task_hint: str | None = None, after: int | None = None
    ) -> Capsule:
        return self.runner.audited(
            identity, "assemble", lambda: self._assemble(identity, budget_tokens, task_hint, after)
        )

    def _assemble(self, identity: Identity, budget: int, hint: str | None, after: int | None) -> Capsule:
        if not 1 <= budget <= MAX_BUDGET:
            raise InvalidRequest(f"budget_tokens must be between 1 and {MAX_BUDGET}")
        if hint is not None and len(hint) > MAX_HINT_CHARS:
            raise InvalidRequest(f"task_hint longer than {MAX_HINT_CHARS} characters")
        self.reads.wait_for(after)
        position = self.reads.position()
        policy = self.policy_of(identity.namespace)
        hint = (hint or "").strip() or None
        memories, _degraded = _degraded_if_unembedded(
            lambda vectors: self._memory_candidates(identity, hint, policy.driver, vectors),
            vectors=hint is not None,  # no hint: nothing to embed
        )
        candidates = directive_candidates(policy) + memories
        plan = plan_capsule(candidates, budget)

        def decide(now: datetime) -> Decided[Capsule]:
            receipt = self._signed(
                Receipt(
                    capsule_id=self.runner.new_id(),
                    merkle_root=blocks_root(plan.blocks),
                    position=position,
                    namespace=identity.namespace,
                    actor=identity.actor,
                    issued_at=now,
                    key_id=self.ledger.signing_key.key_id,
                )
            )
            issued = CapsuleIssued(
                capsule_id=receipt.capsule_id,
                namespace=identity.namespace,
                actor=identity.actor,
                refs=tuple(UUID(b.ref) for b in plan.blocks if b.kind == "memory"),
                merkle_root=receipt.merkle_root,
                read_position=position,
                key_id=receipt.key_id,
                signature=receipt.signature,
                at=now,
            )
            detail = (
                f"{len(plan.blocks)} blocks, {plan.tokens}/{budget} tokens, root {receipt.merkle_root[:16]}"
            )
            return Decided(
                result=lambda _position: Capsule(
                    blocks=plan.blocks, admission=plan.admission, receipt=receipt
                ),
                events=[issued],
                note=Note(detail, subjects=(receipt.capsule_id,)),
            )

        return self.runner.run(identity, "assemble", decide, ISSUED)

    def _memory_candidates(
        self, identity: Identity, hint: str | None, driver: str | None, vectors: bool
    ) -> list[Candidate]:
        with self.reads.scoped(identity, hint or "-", RELEVANT_CANDIDATES, vectors) as view:
            found = [_memory_candidate(m, "pinned", 1.0) for m in view.pinned(identity.namespace)]
            recent = sorted(view.recently_used(RECENT_CANDIDATES), key=lambda m: (m.recorded_at, m.id))
            found += [_memory_candidate(m, "recent", 1.0) for m in recent]
            if hint is not None:
                found += [
                    _memory_candidate(m, "relevant", s) for m, s in view.relevant(driver, RELEVANT_CANDIDATES)
                ]
        return found

    def _signed(self, receipt: Receipt) -> Receipt:
        signature = self.ledger.signing_key.sign(receipt_message(receipt))
        return msgspec.structs.replace(receipt, signature=base64.b64encode(signature).decode())

    def verify_capsule(self, capsule: Capsule) -> str | None:
        """What is wrong with a capsule (None when it holds): the root re-derived from its
        blocks, the signature, and the ledger's record of the same capsule."""
        receipt = capsule.receipt
        if blocks_root(capsule.blocks) != receipt.merkle_root:
            return "the blocks do not hash to the receipt's Merkle root"
        try:
            verify_signature(
                self.ledger.checkpoints.public_keys(),
                receipt.key_id,
                receipt.signature,
                receipt_message(receipt),
                "receipt",
            )
        except InvalidCheckpoint as error:
            return str(error)
        recorded = self.ledger.streams([receipt.capsule_id]).get(receipt.capsule_id, [])
        issued = [r.event for r in recorded if isinstance(r.event, CapsuleIssued)]
        if (
            not issued
            or issued[0].merkle_root != receipt.merkle_root
            or issued[0].read_position != receipt.position
        ):
            return "the ledger holds no such capsule"
        return None

    # -- fault ----------------------------------------------------------------------------------

    def fault(self, identity: Identity, question: str, after: int | None = None) -> FaultAnswer:
        return self.runner.audited(identity, "fault", lambda: self._fault(identity, question, after))

    def _fault(self, identity: Identity, question: str, after: int | None) -> FaultAnswer:
        began = time.perf_counter()
        self.reads.check_query(question, FAULT_CANDIDATES)
        self.reads.wait_for(after)
        found, degraded = _degraded_if_unembedded(lambda vectors: self._tiers(identity, question, vectors))

        def decide(now: datetime) -> Decided[FaultAnswer]:
            fault_id = self.runner.new_id()
            event = ContextFaulted(
                fault_id=fault_id,
                namespace=identity.namespace,
                actor=identity.actor,
                tier=found.tier,
                score=round(found.score, 6),
                best_candidate=found.best,
                refs=tuple(b.ref for b in found.blocks),
                at=now,
            )
            detail = f"tier={found.tier} score={found.score:.3f}" + (
                " driver=lexical-degraded" if degraded else ""
            )
            return Decided(
                result=lambda position: FaultAnswer(
                    hit=found.tier != "miss",
                    source=None if found.tier == "miss" else found.tier,
                    blocks=found.blocks,
                    latency_ms=round((time.perf_counter() - began) * 1000, 3),
                    score=round(found.score, 6),
                    degraded=degraded,
                    position=position,
                ),
                events=[event],
                note=Note(detail, "miss" if found.tier == "miss" else "ok", (fault_id,)),
            )

        return self.runner.run(identity, "fault", decide, ISSUED)

    def _tiers(self, identity: Identity, question: str, vectors: bool) -> _Tiers:
        with self.reads.scoped(identity, question, FAULT_CANDIDATES, vectors) as view:
            l2 = ranked(view.memory_scores(FAULT_CANDIDATES))
            best = l2[0] if l2 else None
            l3: list[tuple[UUID, float]] = []
            if best is None or best[1] < L2_THRESHOLD:
                l3 = ranked(view.knowledge_scores(FAULT_CANDIDATES))
            tier = decide_tier(best[1] if best else None, l3[0][1] if l3 else None)
            blocks = _fault_blocks(view, tier, l2, l3)
        best_l2 = best[1] if best else 0.0
        best_l3 = l3[0][1] if l3 else 0.0
        top = {"L2": best_l2, "L3": best_l3}.get(tier, max(best_l2, best_l3))
        return _Tiers(tier, top, best[0] if best else None, blocks)


def _degraded_if_unembedded(read: Callable[[bool], T], vectors: bool = True) -> tuple[T, bool]:
    """``read`` with the query's embedding; when the embedder is unavailable, lexical only
    (and said to be degraded)."""
    try:
        return read(vectors), False
    except EmbedderUnavailable:
        return read(False), True  # noqa: FBT003 - the same read, without vectors


def _fault_blocks(
    view: ScopedReads, tier: Tier, l2: list[tuple[UUID, float]], l3: list[tuple[UUID, float]]
) -> list[FaultBlock]:
    """The answering tier's best blocks above its threshold."""
    if tier == "L2":
        chosen = [(ref, sc) for ref, sc in l2 if sc >= L2_THRESHOLD][:FAULT_BLOCKS]
        memories = view.memories([ref for ref, _ in chosen])
        return [
            FaultBlock(ref=ref, kind="memory", content=memories[ref].content, score=round(sc, 6))
            for ref, sc in chosen
            if ref in memories
        ]
    if tier == "L3":
        chosen = [(ref, sc) for ref, sc in l3 if sc >= L3_THRESHOLD][:FAULT_BLOCKS]
        chunks = view.knowledge([ref for ref, _ in chosen])
        return [
            FaultBlock(
                ref=ref,
                kind="knowledge",
                content=chunks[ref].text,
                score=round(sc, 6),
                title=chunks[ref].title,
            )
            for ref, sc in chosen
            if ref in chunks
        ]
    return []


def directive_candidates(policy: EffectivePolicy) -> list[Candidate]:
    """The policy's directives, the root namespace's first (a stable order)."""
    return [
        Candidate(
            ref=f"directive:{d.namespace}:{d.id}",
            kind="directive",
            lane="directive",
            content=d.text,
            token_estimate=estimate_tokens(d.text),
            score=1.0,
            order=f"{d.namespace.count('/'):03d}:{d.namespace}:{d.id}",
        )
        for d in policy.directives
    ]


def _memory_candidate(memory: MemoryText, lane: Lane, score: float) -> Candidate:
    return Candidate(
        ref=str(memory.id),
        kind="memory",
        lane=lane,
        content=memory.content,
        token_estimate=estimate_tokens(memory.content),
        score=round(score, 6),
        order=f"{memory.recorded_at.isoformat()}:{memory.id}",
    )
