"""Independent verification: another actor countersigns (or refutes) a memory."""

from __future__ import annotations

from datetime import datetime

from memwarden.domain.model.commands import VerifyMemory
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import MemoryVerified
from memwarden.domain.model.identity import WRITER_ROLES, Identity
from memwarden.domain.model.memory import MemoryState, Verification, trust_tier_from
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.model.storable import check_storable

MAX_NOTE_LENGTH = 2_000


def decide_verify(
    command: VerifyMemory, identity: Identity, memory: MemoryState | None, now: datetime
) -> MemoryVerified:
    if memory is None or memory.namespace not in ancestors(identity.namespace):
        raise NotFound("no such memory")
    if memory.hidden:
        raise NotFound("no such memory")
    if identity.role not in WRITER_ROLES:
        raise Forbidden(f"role {identity.role!r} may not verify")
    if identity.actor in memory.writers:
        raise Forbidden("an actor cannot verify its own write")
    if memory.status != "active" or memory.retired_at is not None:
        raise InvalidState(f"memory is {memory.status}; only active memories can be verified")
    check_storable(command)
    if command.note is not None and len(command.note) > MAX_NOTE_LENGTH:
        raise InvalidRequest(f"note longer than {MAX_NOTE_LENGTH} characters")
    verifications = (
        *memory.verifications,
        Verification(actor=identity.actor, supports=command.supports, at=now),
    )
    return MemoryVerified(
        memory_id=memory.id,
        actor=identity.actor,
        supports=command.supports,
        note=command.note,
        trust_tier=trust_tier_from(verifications, memory.trust_tier, memory.writers),
        at=now,
    )
