"""Leases with fencing tokens: one worker pass per (pass, namespace) at a time.

A lease is a stream whose latest event is its whole state (holder, token, expiry). Taking
a free, released or expired lease appends ``LeaseTaken`` with the next token; the pass's
own append carries ``LeaseReleased`` (same token) at the stream's next version, so the
namespace is free for whichever process has the next message for it. The fencing is the
ledger's own optimistic concurrency: after a takeover, the stale holder's append names a
lease version that is already taken, so the recorder refuses the whole append, in the same
transaction that would have applied it. The expiry check here only spares a holder the
work it would lose; the version check is the guarantee.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec

from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.events import LeaseEvent, LeaseReleased, LeaseTaken


class LeaseBusy(DomainError):
    """Another holder's lease has not expired: try later."""

    code = "lease_busy"


class LeaseLost(DomainError):
    """The lease was taken over (or expired): this holder may no longer append."""

    code = "lease_lost"


class Lease(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    pass_name: str
    namespace: str
    holder: str
    token: int
    expires_at: datetime
    version: int

    def live(self, now: datetime) -> bool:
        return now < self.expires_at


def lease_id(pass_name: str, namespace: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"memwarden:lease:{pass_name}:{namespace}")


def lease_from(event: LeaseEvent, version: int) -> Lease:
    return Lease(
        id=event.lease_id,
        pass_name=event.pass_name,
        namespace=event.namespace,
        holder=event.holder,
        token=event.token,
        expires_at=event.expires_at,
        version=version,
    )


def decide_take(
    current: Lease | None, pass_name: str, namespace: str, holder: str, now: datetime, ttl: timedelta
) -> LeaseTaken:
    """Take the lease with the next token: it is free (never held, released) or expired.
    A live lease is ``LeaseBusy``, for its own holder too: one pass at a time."""
    if ttl <= timedelta(0):
        raise ValueError("a lease needs a positive time to live")
    if current is not None and current.live(now):
        raise LeaseBusy(
            f"the {pass_name} lease of this namespace is held until {current.expires_at.isoformat()}"
        )
    return LeaseTaken(
        lease_id=lease_id(pass_name, namespace),
        pass_name=pass_name,
        namespace=namespace,
        holder=holder,
        token=1 if current is None else current.token + 1,
        expires_at=now + ttl,
        at=now,
    )


def release(lease: Lease, now: datetime) -> LeaseReleased:
    """The fence of a pass's append: the lease is free once it commits. A lease past its
    expiry is lost: another holder may already have taken it."""
    if not lease.live(now):
        raise LeaseLost(f"the {lease.pass_name} lease (token {lease.token}) expired")
    return LeaseReleased(
        lease_id=lease.id,
        pass_name=lease.pass_name,
        namespace=lease.namespace,
        holder=lease.holder,
        token=lease.token,
        expires_at=now,
        at=now,
    )
