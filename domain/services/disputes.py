"""``resolve_dispute``: a reviewer's decision on a quarantined memory and its incumbent
(docs/architecture.md §4), run by the command runner."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.model.commands import ResolveDispute, validated
from memwarden.domain.model.disputes import ResolveState, check_reviewer, decide_resolve
from memwarden.domain.model.events import ClaimKind
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import Claim, DisputeState, MemoryState
from memwarden.domain.services.commands import Decided, Note, Retry
from memwarden.domain.services.memory_context import MemoryContext
from memwarden.domain.services.streams import versions_of
from memwarden.domain.services.vectors import Vectors


class ResolveResult(msgspec.Struct, frozen=True, kw_only=True):
    dispute: DisputeState
    position: int


class DisputeService:
    def __init__(self, shared: MemoryContext) -> None:
        self.shared = shared

    def resolve_dispute(
        self, identity: Identity, command: ResolveDispute, now: datetime | None = None
    ) -> ResolveResult:
        return self.shared.runner.audited(
            identity, "resolve_dispute", lambda: self._resolve(identity, validated(command), now)
        )

    def _resolve(self, identity: Identity, command: ResolveDispute, now: datetime | None) -> ResolveResult:
        replacement_id = self.shared.new_id()
        new_keys: dict[UUID, NewMemoryKey] = {}
        vectors = Vectors()

        def decide(at: datetime) -> Decided[ResolveResult]:
            dispute = check_reviewer(
                identity, self.shared.streams.disputes([command.dispute_id]).get(command.dispute_id)
            )
            memories = self.shared.streams.memories([dispute.memory_id, dispute.incumbent_id])
            new = memories.get(dispute.memory_id)
            claims = self._resolve_claims(dispute, new, command)
            holders = self.shared.streams.memories(
                h for c in claims.values() if c.kind == "slot" for h in c.holders
            )
            memories = {**holders, **memories}
            state = ResolveState(
                dispute=dispute,
                new=new,
                incumbent=memories.get(dispute.incumbent_id),
                slot_claim=next((c for c in claims.values() if c.kind == "slot"), None),
                text_claim=next((c for c in claims.values() if c.kind == "text"), None),
                holders=holders,
            )
            events = decide_resolve(
                command, identity, state, self.shared.policy_for(dispute.namespace), at, replacement_id
            )
            if command.decision == "edit" and replacement_id not in new_keys:
                new_keys[replacement_id] = self.shared.ledger.new_data_key(replacement_id)
            return Decided(
                result=lambda position: ResolveResult(
                    dispute=self.shared.streams.disputes([dispute.id])[dispute.id], position=position
                ),
                events=self.shared.embedding.embedded(events, vectors),
                versions=versions_of(claims.values(), memories.values(), [dispute]),
                note=Note(command.decision, subjects=(dispute.id,)),
                new_keys=list(new_keys.values()),
            )

        retry = Retry("the dispute's memories kept changing; retry")
        return self.shared.runner.run(identity, "resolve_dispute", decide, retry, now)

    def _resolve_claims(
        self, dispute: DisputeState, new: MemoryState | None, command: ResolveDispute
    ) -> dict[UUID, Claim]:
        if new is None or command.decision == "keep_old":
            return {}
        content = command.content if command.decision == "edit" else new.content
        wanted: list[tuple[UUID, ClaimKind, str]] = []
        if content is not None:
            wanted.append((self.shared.claim_ids.text(dispute.namespace, content), "text", dispute.namespace))
        if new.subject is not None and new.attribute is not None:
            slot_id = self.shared.claim_ids.slot(dispute.namespace, new.subject, new.attribute)
            wanted.append((slot_id, "slot", dispute.namespace))
        return self.shared.streams.claims(wanted)
