"""``assemble`` and ``fault``: working sets with signed receipts, and the question a
working set could not answer. Both read through the scoped view and put what the agent
saw on the ledger (one append with the audit record)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

from domain.embedding import EmbedderUnavailable
from domain.ledger.app import Ledger
from domain.ledger.checkpoints import InvalidCheckpoint, verify_signature
from domain.ledger.entropy import new_uuid
from domain.ledger.mapper import Recorded
from domain.model.capsules import (
    Admission,
    Block,
    Candidate,
    Receipt,
    blocks_root,
    plan_capsule,
    receipt_message,
)
from domain.model.errors import InvalidRequest
from domain.model.events import CapsuleIssued, ContextFaulted, Event
from domain.model.faults import L2_THRESHOLD, L3_THRESHOLD, Tier, decide_tier, ranked
from domain.model.identity import Identity
from domain.model.policies import EffectivePolicy
from domain.model.text import estimate_tokens
from domain.services.audit import Audit
from projections.search.drivers import SearchRequest
from projections.search.service import SearchQuery, SearchService, check_query
from projections.search.view import ScopedView

MAX_BUDGET = 200_000
MAX_HINT_CHARS = 2_000
RECENT_CANDIDATES = 20
RELEVANT_CANDIDATES = 20
FAULT_CANDIDATES = 20
FAULT_BLOCKS = 5


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


class ReadsService:
    """``assemble`` and ``fault`` for one process."""

    def __init__(
        self,
        ledger: Ledger,
        search: SearchService,
        read_position: Callable[[], int],
        policy_of: Callable[[str], EffectivePolicy],
        clock: Callable[[], datetime],
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.ledger = ledger
        self.search = search
        self.read_position = read_position
        self.policy_of = policy_of
        self.clock = clock
        self.new_id = new_id
        self.audit = Audit(ledger, clock, new_id)

    # -- assemble -------------------------------------------------------------------------------

    def assemble(
        self, identity: Identity, budget_tokens: int, task_hint: str | None = None, after: int | None = None
    ) -> Capsule:
        return self.audit.audited(
            identity, "assemble", lambda: self._assemble(identity, budget_tokens, task_hint, after)
        )

    def _assemble(self, identity: Identity, budget: int, hint: str | None, after: int | None) -> Capsule:
        if not 1 <= budget <= MAX_BUDGET:
            raise InvalidRequest(f"budget_tokens must be between 1 and {MAX_BUDGET}")
        if hint is not None and len(hint) > MAX_HINT_CHARS:
            raise InvalidRequest(f"task_hint longer than {MAX_HINT_CHARS} characters")
        self.search.wait_for(after)
        position = self.read_position()
        candidates = directive_candidates(self.policy_of(identity.namespace))
        hint = (hint or "").strip() or None
        query = SearchQuery(query=hint or "-", k=RELEVANT_CANDIDATES)
        vector = self.search.embed_later(hint) if hint else None
        try:
            candidates += self._memory_candidates(identity, query, vector, hint is not None)
        except EmbedderUnavailable:
            candidates += self._memory_candidates(identity, query, None, hint is not None)
        plan = plan_capsule(candidates, budget)
        capsule_id, now = self.new_id(), self.clock()
        receipt = self._signed(
            Receipt(
                capsule_id=capsule_id,
                merkle_root=blocks_root(plan.blocks),
                position=position,
                namespace=identity.namespace,
                actor=identity.actor,
                issued_at=now,
                key_id=self.ledger.signing_key.key_id,
            )
        )
        issued = CapsuleIssued(
            capsule_id=capsule_id,
            namespace=identity.namespace,
            actor=identity.actor,
            refs=tuple(UUID(b.ref) for b in plan.blocks if b.kind == "memory"),
            merkle_root=receipt.merkle_root,
            read_position=position,
            key_id=receipt.key_id,
            signature=receipt.signature,
            at=now,
        )
        detail = f"{len(plan.blocks)} blocks, {plan.tokens}/{budget} tokens, root {receipt.merkle_root[:16]}"
        self._append([issued], identity, "assemble", "ok", detail, now, capsule_id)
        return Capsule(blocks=plan.blocks, admission=plan.admission, receipt=receipt)

    def _memory_candidates(
        self, identity: Identity, query: SearchQuery, vector: Callable[[], Any] | None, relevant: bool
    ) -> list[Candidate]:
        with self.search.view(identity, query, vector) as (view, *_):
            found = [_memory_candidate(r, "pinned", 1.0) for r in view.pinned(identity.namespace)]
            recent = sorted(view.recently_used(RECENT_CANDIDATES), key=lambda r: (r["recorded_at"], r["id"]))
            found += [_memory_candidate(r, "recent", 1.0) for r in recent]
            if relevant:
                driver = self.search.drivers[self.search_driver(identity)]
                hits = driver.search(view, SearchRequest(query=query.query, k=RELEVANT_CANDIDATES))
                rows = view.memory_rows([h.ref for h in hits])
                found += [_memory_candidate(rows[h.ref], "relevant", h.score) for h in hits if h.ref in rows]
        return found

    def search_driver(self, identity: Identity) -> str:
        name = self.policy_of(identity.namespace).driver
        return name if name in self.search.drivers else "baseline"

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
        return self.audit.audited(identity, "fault", lambda: self._fault(identity, question, after))

    def _fault(self, identity: Identity, question: str, after: int | None) -> FaultAnswer:
        began = time.perf_counter()
        query = SearchQuery(query=question, k=FAULT_CANDIDATES)
        check_query(query)
        self.search.wait_for(after)
        vector = self.search.embed_later(question)
        try:
            tier, score, best, blocks = self._fault_tiers(identity, query, vector)
            degraded = False
        except EmbedderUnavailable:
            tier, score, best, blocks = self._fault_tiers(identity, query, None)
            degraded = True
        now, fault_id = self.clock(), self.new_id()
        event = ContextFaulted(
            fault_id=fault_id,
            namespace=identity.namespace,
            actor=identity.actor,
            tier=tier,
            score=round(score, 6),
            best_candidate=best,
            refs=tuple(b.ref for b in blocks),
            at=now,
        )
        detail = f"tier={tier} score={score:.3f}" + (" driver=lexical-degraded" if degraded else "")
        position = self._append(
            [event], identity, "fault", "miss" if tier == "miss" else "ok", detail, now, fault_id
        )
        return FaultAnswer(
            hit=tier != "miss",
            source=None if tier == "miss" else tier,
            blocks=blocks,
            latency_ms=round((time.perf_counter() - began) * 1000, 3),
            score=round(score, 6),
            degraded=degraded,
            position=position,
        )

    def _fault_tiers(
        self, identity: Identity, query: SearchQuery, vector: Callable[[], Any] | None
    ) -> tuple[Tier, float, UUID | None, list[FaultBlock]]:
        with self.search.view(identity, query, vector) as (view, conn, _scope, _shared):
            l2 = ranked(view.scores(l2_candidates(view)))
            best = l2[0] if l2 else None
            l3: list[tuple[UUID, float]] = []
            if best is None or best[1] < L2_THRESHOLD:
                l3 = ranked(view.knowledge_scores(FAULT_CANDIDATES))
            tier = decide_tier(best[1] if best else None, l3[0][1] if l3 else None)
            if tier == "L2":
                chosen = [(ref, sc) for ref, sc in l2 if sc >= L2_THRESHOLD][:FAULT_BLOCKS]
                blocks = memory_blocks(view, chosen)
            elif tier == "L3":
                chosen = [(ref, sc) for ref, sc in l3 if sc >= L3_THRESHOLD][:FAULT_BLOCKS]
                blocks = knowledge_blocks(conn, self.ledger.schema, chosen)
            else:
                blocks = []
        best_l3 = l3[0][1] if l3 else 0.0
        top = {"L2": best[1] if best else 0.0, "L3": best_l3}.get(
            tier, max(best[1] if best else 0.0, best_l3)
        )
        return tier, top, best[0] if best else None, blocks

    # -- plumbing -------------------------------------------------------------------------------

    def _append(
        self,
        events: Sequence[Event],
        identity: Identity,
        op: str,
        outcome: Any,
        detail: str,
        now: datetime,
        subject: UUID,
    ) -> int:
        audit = self.audit.event(identity, op, outcome, detail, now, subject)
        recorded = [Recorded(e.stream_id, 1, e) for e in events]
        return self.ledger.append([*recorded, Recorded(audit.record_id, 1, audit)])


def l2_candidates(view: ScopedView) -> list[UUID]:
    refs = [h.ref for h in view.lexical_lane(FAULT_CANDIDATES)]
    if view.has_vectors:
        refs += [h.ref for h in view.vector_lane(FAULT_CANDIDATES)]
    return list(dict.fromkeys(refs))


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


def _memory_candidate(row: dict[str, Any], lane: Any, score: float) -> Candidate:
    return Candidate(
        ref=str(row["id"]),
        kind="memory",
        lane=lane,
        content=row["content"],
        token_estimate=estimate_tokens(row["content"]),
        score=round(score, 6),
        order=f"{row['recorded_at'].isoformat()}:{row['id']}",
    )


def memory_blocks(view: ScopedView, chosen: list[tuple[UUID, float]]) -> list[FaultBlock]:
    rows = view.memory_rows([ref for ref, _ in chosen])
    return [
        FaultBlock(ref=ref, kind="memory", content=rows[ref]["content"], score=round(sc, 6))
        for ref, sc in chosen
        if ref in rows
    ]


def knowledge_blocks(
    conn: Connection[Any], schema: str, chosen: list[tuple[UUID, float]]
) -> list[FaultBlock]:
    rows = conn.execute(
        SQL(
            "SELECT c.ref, c.heading, c.text, d.title FROM {s}.knowledge_chunks c"
            " JOIN {s}.knowledge_documents d ON d.document_id = c.document_id WHERE c.ref = ANY(%s)"
        ).format(s=Identifier(schema)),
        ([ref for ref, _ in chosen],),
    ).fetchall()
    by_ref = {r["ref"]: r for r in rows}
    return [
        FaultBlock(
            ref=ref,
            kind="knowledge",
            content=by_ref[ref]["text"],
            score=round(sc, 6),
            title=by_ref[ref]["title"],
        )
        for ref, sc in chosen
        if ref in by_ref
    ]
