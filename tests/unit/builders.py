"""Builders for the pure domain model: states, identities and a tiny in-memory fold.

Nothing here touches a database, the network or the clock: every time is explicit.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import NAMESPACE_OID, UUID, uuid5

from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory, WritePolicy
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    DisputeOpened,
    DisputeResolved,
    Event,
    MemoryEvent,
    Provenance,
)
from memwarden.domain.model.identity import Identity, Role
from memwarden.domain.model.memory import (
    Claim,
    DisputeState,
    MemoryState,
    evolve_claim,
    evolve_dispute,
    evolve_memory,
)
from memwarden.domain.model.text import normalize, normalize_key
from memwarden.domain.model.write import WriteDecision, WriteState, decide_write

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NS = "acme/eng"
POLICY = WritePolicy()


def at(days: float = 0, *, hours: float = 0, start: datetime = T0) -> datetime:
    return start + timedelta(days=days, hours=hours)


_ids = itertools.count(1_000)


def uid(n: int | None = None) -> UUID:
    """A deterministic UUID; a fresh one from a counter when ``n`` is not given."""
    return UUID(int=next(_ids) if n is None else n)


DOCUMENT_AGENT_CAP = "document"
"""The agents of these tests ingest documents: their keys may claim up to ``document``, so the
trust lattice's tests reach every source below ``manual``. A key made without a cap gets its
role's default (``conversation`` for an agent): ``CHATTY_AGENT``."""


def ident(
    role: Role = "agent", actor: str | None = None, namespace: str = NS, max_provenance: str | None = ""
) -> Identity:
    cap = (DOCUMENT_AGENT_CAP if role == "agent" else None) if max_provenance == "" else max_provenance
    return Identity(namespace=namespace, actor=actor or f"{role}-1", role=role, max_provenance=cap)


AGENT = ident("agent", "agent-a")
OTHER_AGENT = ident("agent", "agent-b")
CHATTY_AGENT = ident("agent", "agent-c", max_provenance=None)
MEMBER = ident("member", "member-m")
ADMIN = ident("admin", "admin-x")
OWNER = ident("owner", "owner-o")
AUDITOR = ident("auditor", "auditor-q")


def cmd(content: str = "Dana lives in Lisbon", **fields: Any) -> WriteMemory:
    source = fields.pop("source", None)
    ref = fields.pop("ref", None)
    if source is not None or ref is not None:
        fields["provenance"] = ProvenanceClaim(source=source or "conversation", ref=ref)
    return WriteMemory(content=content, **fields)


def memory(
    id: UUID | None = None,  # noqa: A002 - mirrors the field name
    *,
    content: str | None = "Dana lives in Porto",
    value: str | None = None,
    subject: str | None = None,
    attribute: str | None = None,
    namespace: str = NS,
    actor: str = "agent-a",
    source: str = "conversation",
    provenance: tuple[Provenance, ...] | None = None,
    recorded_at: datetime | None = None,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    retired_at: datetime | None = None,
    status: str = "active",
    trust_tier: str | None = None,
    **extra: Any,
) -> MemoryState:
    recorded = recorded_at or at(-10)
    return MemoryState(
        id=id or uid(),
        namespace=namespace,
        actor=actor,
        type=extra.pop("type", "fact"),
        scope=extra.pop("scope", "team"),
        content=content,
        value=value,
        subject=subject,
        attribute=attribute,
        tags=extra.pop("tags", ()),
        selectors=extra.pop("selectors", ()),
        provenance=provenance or (Provenance(source=source, actor=actor),),
        event_time=extra.pop("event_time", None),
        recorded_at=recorded,
        valid_from=valid_from or recorded,
        valid_to=valid_to,
        retired_at=retired_at,
        status=status,  # type: ignore[arg-type]
        trust_tier=trust_tier or ("candidate" if status == "disputed" else "canonical"),  # type: ignore[arg-type]
        classification=extra.pop("classification", Classification()),
        version=extra.pop("version", 1),
        **extra,
    )


def claim(
    kind: ClaimKind,
    holders: Iterable[UUID] = (),
    *,
    id: UUID | None = None,  # noqa: A002
    namespace: str = NS,
    version: int | None = None,
) -> Claim:
    held = tuple(holders)
    return Claim(
        id=id or uid(),
        kind=kind,
        namespace=namespace,
        holders=held,
        version=(1 if held else 0) if version is None else version,
    )


NEW_ID = UUID(int=100)
DISPUTE_ID = UUID(int=200)
TEXT_CLAIM_ID = UUID(int=1)
SLOT_CLAIM_ID = UUID(int=2)
REF_CLAIM_ID = UUID(int=3)


def write_state(
    *,
    text: Iterable[MemoryState] = (),
    slot: Iterable[MemoryState] | None = None,
    ref: Iterable[MemoryState] | None = None,
) -> WriteState:
    """A WriteState whose claims are held by the given memories (and knows all of them)."""
    text, slot_list, ref_list = (
        list(text),
        None if slot is None else list(slot),
        None if ref is None else list(ref),
    )
    holders = {m.id: m for m in [*text, *(slot_list or []), *(ref_list or [])]}
    return WriteState(
        text_claim=claim("text", (m.id for m in text), id=TEXT_CLAIM_ID),
        slot_claim=None if slot_list is None else claim("slot", (m.id for m in slot_list), id=SLOT_CLAIM_ID),
        source_ref_claim=None
        if ref_list is None
        else claim("source_ref", (m.id for m in ref_list), id=REF_CLAIM_ID),
        holders=holders,
    )


def decide(
    command: WriteMemory,
    state: WriteState | None = None,
    identity: Identity = AGENT,
    now: datetime = T0,
    policy: WritePolicy = POLICY,
    memory_id: UUID = NEW_ID,
    dispute_id: UUID = DISPUTE_ID,
) -> WriteDecision:
    return decide_write(command, identity, state or write_state(), policy, now, memory_id, dispute_id)


def of_type(events: Iterable[Event], kind: type[Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def fold_memory(state: MemoryState | None, events: Iterable[Event], memory_id: UUID) -> MemoryState:
    """Fold the events of one memory stream onto ``state``."""
    for event in events:
        if isinstance(event, MemoryEvent) and event.memory_id == memory_id:
            state = evolve_memory(state, event)
    assert state is not None, f"no events for memory {memory_id}"
    return state


def text_claim_id(content: str, namespace: str = NS) -> UUID:
    return uuid5(NAMESPACE_OID, f"text\x00{namespace}\x00{normalize(content)}")


def slot_claim_id(subject: str, attribute: str, namespace: str = NS) -> UUID:
    return uuid5(
        NAMESPACE_OID, f"slot\x00{namespace}\x00{normalize_key(subject)}\x00{normalize_key(attribute)}"
    )


def ref_claim_id(source: str, ref: str, namespace: str = NS) -> UUID:
    return uuid5(NAMESPACE_OID, f"source_ref\x00{namespace}\x00{source}\x00{normalize_key(ref)}")


class Store:
    """An in-memory ledger fold: memories, disputes and claims by stream id."""

    def __init__(self) -> None:
        self.memories: dict[UUID, MemoryState] = {}
        self.disputes: dict[UUID, DisputeState] = {}
        self.claims: dict[UUID, Claim] = {}
        self.log: list[Event] = []

    def add(self, *memories: MemoryState) -> None:
        for m in memories:
            self.memories[m.id] = m

    def apply(self, events: Iterable[Event]) -> None:
        for event in events:
            self.log.append(event)
            if isinstance(event, MemoryEvent):
                self.memories[event.memory_id] = evolve_memory(self.memories.get(event.memory_id), event)
            elif isinstance(event, DisputeOpened | DisputeResolved):
                self.disputes[event.dispute_id] = evolve_dispute(self.disputes.get(event.dispute_id), event)
            elif isinstance(event, ClaimSet):
                self.claims[event.claim_id] = evolve_claim(self.claims.get(event.claim_id), event)
            else:  # pragma: no cover - the deciders emit nothing else
                raise TypeError(f"unexpected event {event!r}")

    def claim(self, claim_id: UUID, kind: ClaimKind, namespace: str = NS) -> Claim:
        return self.claims.get(claim_id) or Claim(id=claim_id, kind=kind, namespace=namespace)

    def write_state(self, text_id: UUID, slot_id: UUID | None, ref_id: UUID | None) -> WriteState:
        text = self.claim(text_id, "text")
        slot = None if slot_id is None else self.claim(slot_id, "slot")
        ref = None if ref_id is None else self.claim(ref_id, "source_ref")
        wanted = [h for c in (text, slot, ref) if c is not None for h in c.holders]
        return WriteState(
            text_claim=text,
            slot_claim=slot,
            source_ref_claim=ref,
            holders={h: self.memories[h] for h in wanted if h in self.memories},
        )

    def write(
        self,
        command: WriteMemory,
        identity: Identity = AGENT,
        now: datetime = T0,
        policy: WritePolicy = POLICY,
    ) -> WriteDecision:
        """Decide a write against this store (claims keyed like the service's) and fold it."""
        namespace = identity.namespace
        slot_id = (
            None
            if command.subject is None or command.attribute is None
            else slot_claim_id(command.subject, command.attribute, namespace)
        )
        ref = command.provenance.ref
        ref_id = None if ref is None else ref_claim_id(command.provenance.source, ref, namespace)
        state = self.write_state(text_claim_id(command.content, namespace), slot_id, ref_id)
        decision = decide_write(command, identity, state, policy, now, uid(), uid())
        self.apply(decision.events)
        return decision

    def current(self, now: datetime) -> list[MemoryState]:
        return [m for m in self.memories.values() if m.is_current(now)]


EXPENSE_POLICY = """---
title: Expense policy
tags: [finance]
---
# Expense policy

## Travel
Economy class for flights under six hours. Hotel nights are reimbursed up to 180 euros.

## Equipment
Laptops are replaced every three years; monitors on request.
"""
"""A small knowledge document (markdown with YAML front matter) for the L3 tests."""
