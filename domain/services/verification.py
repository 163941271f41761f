"""``verify``: another actor countersigns (or refutes) a memory, run by the command runner."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.model.commands import VerifyMemory, validated
from memwarden.domain.model.events import TrustTier
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.verification import decide_verify
from memwarden.domain.services.commands import Decided, Note, Retry
from memwarden.domain.services.memory_context import MemoryContext


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    trust_tier: TrustTier
    position: int


class VerificationService:
    def __init__(self, shared: MemoryContext) -> None:
        self.shared = shared

    def verify(self, identity: Identity, command: VerifyMemory, now: datetime | None = None) -> VerifyResult:
        return self.shared.runner.audited(
            identity, "verify", lambda: self._verify(identity, validated(command), now)
        )

    def _verify(self, identity: Identity, checked: VerifyMemory, now: datetime | None) -> VerifyResult:
        def decide(at: datetime) -> Decided[VerifyResult]:
            memory = self.shared.streams.memories([checked.memory_id]).get(checked.memory_id)
            event = decide_verify(checked, identity, memory, at)
            assert memory is not None
            return Decided(
                result=lambda position: VerifyResult(
                    id=memory.id, trust_tier=event.trust_tier, position=position
                ),
                events=[event],
                versions={memory.id: memory.version},
                note=Note("supports" if checked.supports else "refutes", subjects=(memory.id,)),
            )

        retry = Retry("the memory kept changing; retry the verification")
        return self.shared.runner.run(identity, "verify", decide, retry, now)
