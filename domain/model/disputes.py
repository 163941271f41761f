"""The dispute-resolution decider: a reviewer settles a quarantined contradiction."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.model.commands import ResolveDispute, WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import (
    ClaimSet,
    DisputeResolved,
    Event,
    MemoryReleased,
    MemoryRetired,
    MemorySuperseded,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.identity import REVIEWER_ROLES, Identity
from memwarden.domain.model.memory import Claim, DisputeState, MemoryState
from memwarden.domain.model.namespaces import is_within
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import normalize
from memwarden.domain.model.write import stays_current, supersede, verify_content


class ResolveState(msgspec.Struct, frozen=True, kw_only=True):
    dispute: DisputeState | None
    new: MemoryState | None = None
    incumbent: MemoryState | None = None
    slot_claim: Claim | None = None
    text_claim: Claim | None = None
    """The text claim of what becomes active (the new memory's text, or the edit's)."""
    holders: dict[UUID, MemoryState] = msgspec.field(default_factory=dict)
    """The memories the slot claim names, so a resolution sees the slot as it is now."""


def check_reviewer(reviewer: Identity, dispute: DisputeState | None) -> DisputeState:
    if dispute is None or not is_within(dispute.namespace, reviewer.namespace):
        raise NotFound("no such dispute")
    if reviewer.role not in REVIEWER_ROLES:
        raise Forbidden(f"role {reviewer.role!r} may not resolve disputes")
    return dispute


def decide_resolve(
    command: ResolveDispute,
    reviewer: Identity,
    state: ResolveState,
    policy: WritePolicy,
    now: datetime,
    replacement_id: UUID,
) -> tuple[Event, ...]:
    dispute = check_reviewer(reviewer, state.dispute)
    check_storable(command)
    if dispute.status != "open":
        raise InvalidState(f"dispute already resolved ({dispute.decision})")
    new, incumbent = state.new, state.incumbent
    if new is None or incumbent is None:
        raise InvalidState("the disputed memories are no longer available")
    if new.status == "erased" or incumbent.status == "erased":
        raise InvalidState("a disputed memory was erased; nothing is left to review")
    if command.decision != "edit" and command.content is not None:
        raise InvalidRequest("content is only for the 'edit' decision")
    resolved = DisputeResolved(
        dispute_id=dispute.id,
        decision=command.decision,
        reviewer=reviewer.actor,
        reason=command.reason,
        replacement_id=replacement_id if command.decision == "edit" else None,
        at=now,
    )
    reason = f"dispute:{command.decision}"
    if command.decision == "keep_old":
        retired = MemoryRetired(
            memory_id=new.id,
            reason=command.reason or "rejected in review",
            dispute_id=dispute.id,
            kept=incumbent.id,
            at=now,
        )
        return (retired, resolved)
    if command.decision == "both_valid":
        released = MemoryReleased(memory_id=new.id, dispute_id=dispute.id, at=now)
        claims = _activate(state, new.id, (), now)
        return (released, *claims, resolved)
    if command.decision == "uphold_new":
        displaced = _displaced(state, new.slot_value, new.id, now)
        supersessions = [supersede(m, new.id, new.valid_from, reason, now) for m in displaced]
        released = MemoryReleased(
            memory_id=new.id, dispute_id=dispute.id, supersedes=tuple(m.id for m in displaced), at=now
        )
        claims = _activate(state, new.id, _leaving(supersessions, now), now)
        return (released, *supersessions, *claims, resolved)
    return _edit(command, reviewer, state, policy, now, replacement_id, resolved)


def _displaced(state: ResolveState, value: str, winner: UUID, now: datetime) -> list[MemoryState]:
    """What the accepted memory supersedes: the incumbent, and every current slot holder
    with another value (the slot may have moved on while the dispute was open)."""
    found: dict[UUID, MemoryState] = {}
    if state.incumbent is not None and state.incumbent.is_current(now):
        found[state.incumbent.id] = state.incumbent
    holders = state.slot_claim.holders if state.slot_claim is not None else ()
    for holder in (state.holders.get(h) for h in holders):
        if (
            holder is not None
            and holder.id != winner
            and holder.is_current(now)
            and holder.slot_value != value
        ):
            found[holder.id] = holder
    return list(found.values())


def _leaving(supersessions: list[MemorySuperseded], now: datetime) -> tuple[UUID, ...]:
    """Superseded memories that stop being current now (so they leave the slot claim)."""
    return tuple(s.memory_id for s in supersessions if not stays_current(s, now))


def _edit(
    command: ResolveDispute,
    reviewer: Identity,
    state: ResolveState,
    policy: WritePolicy,
    now: datetime,
    replacement_id: UUID,
    resolved: DisputeResolved,
) -> tuple[Event, ...]:
    """A reviewer writes the corrected fact with ``manual`` provenance."""
    new, incumbent = state.new, state.incumbent
    assert new is not None
    assert incumbent is not None
    if command.content is None:
        raise InvalidRequest("the 'edit' decision needs content")
    classification, rejections = verify_content(command.content, policy)
    if rejections:
        raise InvalidRequest("; ".join(r.detail for r in rejections))
    value = command.value if command.value is not None else new.value
    displaced = _displaced(state, normalize(value if value is not None else command.content), new.id, now)
    written = MemoryWritten(
        memory_id=replacement_id,
        namespace=new.namespace,
        actor=reviewer.actor,
        type=new.type,
        scope=new.scope,
        content=command.content,
        value=value,
        subject=new.subject,
        attribute=new.attribute,
        tags=new.tags,
        selectors=new.selectors,
        provenance=(Provenance(source="manual", actor=reviewer.actor, ref=f"dispute:{resolved.dispute_id}"),),
        event_time=new.event_time,
        valid_from=new.valid_from,
        status="active",
        trust_tier="canonical",
        # the quarantined memory is an earlier version of what the reviewer wrote
        supersedes=(new.id, *(m.id for m in displaced)),
        classification=classification,
        reason="dispute:edit",
        at=now,
    )
    events: list[Event] = [
        written,
        MemoryRetired(
            memory_id=new.id,
            reason="replaced by a reviewer's edit",
            dispute_id=resolved.dispute_id,
            replaced_by=replacement_id,
            at=now,
        ),
    ]
    supersessions = [supersede(m, replacement_id, new.valid_from, "dispute:edit", now) for m in displaced]
    events.extend(supersessions)
    events.extend(_activate(state, replacement_id, (new.id, *_leaving(supersessions, now)), now))
    return (*events, resolved)


def _activate(state: ResolveState, memory_id: UUID, drop: tuple[UUID, ...], now: datetime) -> list[ClaimSet]:
    """Claims for a memory that becomes active: its text, and its slot without ``drop``."""
    claims: list[ClaimSet] = []
    if state.text_claim is not None:
        claims.append(_set(state.text_claim, (memory_id,), now))
    if state.slot_claim is not None:
        keep = tuple(h for h in state.slot_claim.holders if h not in drop and h != memory_id)
        claims.append(_set(state.slot_claim, (*keep, memory_id), now))
    return claims


def _set(claim: Claim, holders: tuple[UUID, ...], now: datetime) -> ClaimSet:
    return ClaimSet(claim_id=claim.id, kind=claim.kind, namespace=claim.namespace, holders=holders, at=now)
