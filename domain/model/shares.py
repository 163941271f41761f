"""Shares and pins: who may make a memory visible elsewhere, or pin it. Pure."""

from __future__ import annotations

from datetime import datetime
from uuid import NAMESPACE_URL, UUID, uuid5

from memwarden.domain.model.errors import Forbidden, InvalidRequest, NotFound
from memwarden.domain.model.events import MemoryShared, PinSet
from memwarden.domain.model.identity import REVIEWER_ROLES, WRITER_ROLES, Identity
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.namespaces import ancestors, is_within, tenant_of, validate_namespace


def share_stream(memory_id: UUID, with_namespace: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"memwarden:share:{memory_id}\x00{with_namespace}")


def pin_stream(namespace: str, memory_id: UUID) -> UUID:
    return uuid5(NAMESPACE_URL, f"memwarden:pin:{namespace}\x00{memory_id}")


def decide_share(
    caller: Identity, memory: MemoryState | None, with_namespace: str, now: datetime
) -> MemoryShared:
    """Admins and owners share memories of their own subtree with a namespace of their tenant."""
    if caller.role not in REVIEWER_ROLES:
        raise Forbidden(f"role {caller.role!r} may not share memories")
    validate_namespace(with_namespace)
    if memory is None or memory.hidden or not is_within(memory.namespace, caller.namespace):
        raise NotFound("no such memory")
    if tenant_of(with_namespace) != tenant_of(caller.namespace):
        raise Forbidden("a memory can only be shared within the caller's tenant")
    if memory.namespace in ancestors(with_namespace):
        raise InvalidRequest(f"{with_namespace!r} already sees {memory.namespace!r}")
    return MemoryShared(
        share_id=share_stream(memory.id, with_namespace),
        memory_id=memory.id,
        memory_namespace=memory.namespace,
        with_namespace=with_namespace,
        by=caller.actor,
        at=now,
    )


def decide_pin(caller: Identity, memory_id: UUID, visible: bool, pinned: bool, now: datetime) -> PinSet:
    """Pin (or unpin) a memory the caller can read, for the caller's namespace."""
    if caller.role not in WRITER_ROLES:
        raise Forbidden(f"role {caller.role!r} may not pin")
    if not visible:
        raise NotFound("no such memory")
    return PinSet(
        pin_id=pin_stream(caller.namespace, memory_id),
        namespace=caller.namespace,
        memory_id=memory_id,
        pinned=pinned,
        by=caller.actor,
        at=now,
    )
