"""The write decider (docs/architecture.md section 4, steps 3-7): pure, no I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Literal
from uuid import UUID

import msgspec

from memwarden.domain.model.classification import Classification, classify
from memwarden.domain.model.commands import WriteMemory, WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, ProvenanceNotAllowed
from memwarden.domain.model.events import (
    ClaimSet,
    DisputeOpened,
    Event,
    MemoryReaffirmed,
    MemorySuperseded,
    MemoryWritten,
    Provenance,
    SupersedenceKind,
)
from memwarden.domain.model.identity import WRITER_ROLES, Identity
from memwarden.domain.model.memory import Claim, MemoryState, trust_tier_from
from memwarden.domain.model.settling import Pair, conflict_settled, finding_opened, settlement
from memwarden.domain.model.storable import unstorable_field
from memwarden.domain.model.text import is_low_information, normalize, normalize_key
from memwarden.domain.model.trust import HUMAN_ONLY_SOURCES, OverCap, source_rank

Outcome = Literal["stored", "deduplicated", "superseded", "disputed", "rejected"]
MAX_TAGS = 64
MAX_TAG_LENGTH = 128
MAX_FIELD_LENGTH = 512
MAX_BATCH_ITEMS = 256
"""The most writes one ``write_batch`` decides and appends together."""


class Rejection(msgspec.Struct, frozen=True):
    reason: str
    detail: str


class WriteState(msgspec.Struct, frozen=True, kw_only=True):
    """What the decider needs to know: the claims the write touches and their holders."""

    text_claim: Claim
    slot_claim: Claim | None = None
    source_ref_claim: Claim | None = None
    holders: dict[UUID, MemoryState] = msgspec.field(default_factory=dict)
    judged: tuple[Pair, ...] = ()
    """Own-namespace neighbours the judge found the (unslotted) write contradicts, in the
    synchronous band: settled by the namespace's ``conflict_review`` dial, as the
    autopilot settles them (domain/model/settling.py)."""
    band_judged: tuple[UUID, ...] = ()
    """Every neighbour the band judged the write against, whatever the verdict."""
    judge: str = ""
    """The judge that judged ``judged``."""


class WriteDecision(msgspec.Struct, frozen=True, kw_only=True):
    outcome: Outcome
    memory_id: UUID | None = None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    events: tuple[Event, ...] = ()
    provenance_capped: tuple[str, str] | None = None
    """(claimed, applied): the writer's claim was above its key's cap and lowered to it."""
    findings: tuple[UUID, ...] = ()
    """Findings the band opened in this append: contradictions the dial leaves to a person."""
    decisions: tuple[UUID, ...] = ()
    """The band's automatic settlements in this append, each a decision a reviewer may overturn."""


def check_write_allowed(identity: Identity, source: str) -> None:
    if identity.role not in WRITER_ROLES:
        raise Forbidden(f"role {identity.role!r} may not write")
    source_rank(source)
    if source in HUMAN_ONLY_SOURCES and not identity.is_human:
        raise ProvenanceNotAllowed(f"role {identity.role!r} may not claim {source!r} provenance")


def allowed_source(identity: Identity, claimed: str, over_cap: OverCap) -> str:
    """The source a write may carry: what it claimed, or its key's cap when the claim is above
    it and the namespace's policy lowers such claims; refused when the policy says so."""
    cap = identity.provenance_cap
    if source_rank(claimed) <= source_rank(cap):
        return claimed
    if over_cap == "refuse":
        raise ProvenanceNotAllowed(f"this key may claim at most {cap!r} provenance, not {claimed!r}")
    return cap


def _check_shape(command: WriteMemory) -> None:
    if (command.subject is None) != (command.attribute is None):
        raise InvalidRequest("subject and attribute go together: give both or neither")
    if command.value is not None and command.subject is None:
        raise InvalidRequest("value needs a slot: give subject and attribute")
    for name in ("subject", "attribute", "value"):
        field = getattr(command, name)
        if field is not None and not (0 < len(field.strip()) <= MAX_FIELD_LENGTH):
            raise InvalidRequest(f"{name} must be 1-{MAX_FIELD_LENGTH} characters")
    for name in ("subject", "attribute"):
        field = getattr(command, name)
        if field is not None and not normalize_key(field):
            # only invisible characters or punctuation: every such spelling would be one slot
            raise InvalidRequest(f"{name} must have a visible letter, digit or symbol")
    ref = command.provenance.ref
    if ref is not None and not (0 < len(ref) <= MAX_FIELD_LENGTH):
        raise InvalidRequest(f"provenance.ref must be 1-{MAX_FIELD_LENGTH} characters")
    for name, handles in (("tags", command.tags), ("selectors", command.selectors)):
        if len(handles) > MAX_TAGS:
            raise InvalidRequest(f"at most {MAX_TAGS} {name}")
        if any(not (0 < len(h) <= MAX_TAG_LENGTH) for h in handles):
            raise InvalidRequest(f"each of {name} must be 1-{MAX_TAG_LENGTH} characters")


def verify_content(content: str, policy: WritePolicy) -> tuple[Classification, tuple[Rejection, ...]]:
    """Classify, and list every reason to refuse the content (never silently)."""
    rejections: list[Rejection] = []
    size = len(content.encode("utf-8"))
    if not content.strip():
        rejections.append(Rejection("empty", "content is empty"))
    elif size > policy.max_content_bytes:
        rejections.append(
            Rejection("too_large", f"content is {size} bytes; the limit is {policy.max_content_bytes}")
        )
    elif is_low_information(content):
        rejections.append(Rejection("low_information", "content carries too little information"))
    classification = classify(content[: policy.max_content_bytes])
    if policy.forbid_secrets and classification.secrets:
        kinds = ", ".join(classification.secrets)
        rejections.append(
            Rejection("secret_forbidden", f"content holds a secret ({kinds}); policy forbids it")
        )
    return classification, tuple(rejections)


def supersedence_kind(new_valid_from: datetime, old: MemoryState) -> SupersedenceKind:
    """Succession when the world changed (later valid_from), correction when we were wrong."""
    return "succession" if new_valid_from > old.valid_from else "correction"


def supersede(
    old: MemoryState, by: UUID, valid_from: datetime, reason: str, now: datetime
) -> MemorySuperseded:
    kind = supersedence_kind(valid_from, old)
    return MemorySuperseded(
        memory_id=old.id,
        by=by,
        kind=kind,
        reason=reason,
        valid_to=valid_from if kind == "succession" else None,
        at=now,
    )


def stays_current(superseded: MemorySuperseded, now: datetime) -> bool:
    """A succession that starts in the future leaves the old memory current until then."""
    return superseded.kind == "succession" and superseded.valid_to is not None and superseded.valid_to > now


def current_holders(claim: Claim | None, state: WriteState, now: datetime) -> list[MemoryState]:
    if claim is None:
        return []
    found = (state.holders.get(h) for h in claim.holders)
    return [m for m in found if m is not None and m.is_current(now)]


def decide_write(
    command: WriteMemory,
    identity: Identity,
    state: WriteState,
    policy: WritePolicy,
    now: datetime,
    memory_id: UUID,
    dispute_id: UUID,
    review_ids: Iterator[UUID] | None = None,
) -> WriteDecision:
    """``review_ids``: the ids of the findings and decisions the band's contradictions
    open (one each), needed only when ``state.judged`` holds any."""
    check_write_allowed(identity, command.provenance.source)
    unstorable = unstorable_field(command)
    if unstorable is not None:  # before anything reads the text: it may not even encode
        return WriteDecision(outcome="rejected", rejected=(Rejection("unstorable", unstorable),))
    _check_shape(command)
    classification, rejections = verify_content(command.content, policy)
    if rejections:
        return WriteDecision(outcome="rejected", rejected=rejections, classification=classification)
    source = allowed_source(identity, command.provenance.source, policy.provenance_over_cap)
    capped = (command.provenance.source, source) if source != command.provenance.source else None
    decision = _decide_provenanced(
        command,
        identity,
        state,
        Provenance(source=source, actor=identity.actor, ref=command.provenance.ref),
        classification,
        now,
        memory_id,
        dispute_id,
        policy,
        review_ids or iter(()),
    )
    return msgspec.structs.replace(decision, provenance_capped=capped) if capped else decision


def _decide_provenanced(
    command: WriteMemory,
    identity: Identity,
    state: WriteState,
    provenance: Provenance,
    classification: Classification,
    now: datetime,
    memory_id: UUID,
    dispute_id: UUID,
    policy: WritePolicy,
    review_ids: Iterator[UUID],
) -> WriteDecision:
    duplicates = [m for m in current_holders(state.text_claim, state, now) if _same_value(m, command)]
    if duplicates:
        return _deduplicate(duplicates[0], provenance, classification, now)

    valid_from = command.valid_from or command.event_time or now
    new_value = normalize(command.value if command.value is not None else command.content)
    slot_holders = current_holders(state.slot_claim, state, now)
    contradicted = {m.id: (m, "slot") for m in slot_holders if m.slot_value != new_value}
    for m in current_holders(state.source_ref_claim, state, now):
        contradicted.setdefault(m.id, (m, "source_ref"))

    new_rank = source_rank(provenance.source)
    band = _band_settlements(state, identity.namespace, new_rank, policy, now, contradicted)
    incumbents = [m for m, _ in contradicted.values()] + [p.neighbour for p in band["older"]]
    top = max(incumbents, key=lambda m: (m.rank, m.recorded_at), default=None)
    if top is not None and new_rank < top.rank:
        return _quarantine(
            command,
            identity,
            provenance,
            classification,
            top,
            valid_from,
            now,
            memory_id,
            dispute_id,
            contradicted[top.id][1] if top.id in contradicted else "judged",
            state.band_judged,
        )

    for pair in band["newer"]:
        contradicted[pair.neighbour.id] = (pair.neighbour, "judged")
    written = _memory_written(
        command,
        identity,
        provenance,
        classification,
        valid_from,
        now,
        memory_id,
        status="active",
        supersedes=tuple(contradicted),
        band_judged=state.band_judged,
    )
    supersessions = [supersede(m, memory_id, valid_from, reason, now) for m, reason in contradicted.values()]
    still_current = {s.memory_id for s in supersessions if stays_current(s, now)}
    events: list[Event] = [written, *supersessions]
    dial, judge = policy.conflict_review, state.judge
    settled = [
        conflict_settled(
            identity.namespace, memory_id, p.neighbour.id, p, judge, dial, now, _next(review_ids)
        )
        for p in band["newer"]
    ]
    findings = [
        finding_opened(identity.namespace, memory_id, p, judge, now, _next(review_ids))
        for p in band["finding"]
    ]
    events.extend([*settled, *findings])
    events.append(_claim(state.text_claim, (memory_id,), now))
    if state.slot_claim is not None:
        keep = tuple(m.id for m in slot_holders if m.id not in contradicted or m.id in still_current)
        events.append(_claim(state.slot_claim, (*keep, memory_id), now))
    if state.source_ref_claim is not None:
        events.append(_claim(state.source_ref_claim, (memory_id,), now))
    return WriteDecision(
        outcome="superseded" if contradicted else "stored",
        memory_id=memory_id,
        supersedes=tuple(contradicted),
        classification=classification,
        events=tuple(events),
        findings=tuple(f.finding_id for f in findings),
        decisions=tuple(d.decision_id for d in settled),
    )


def _band_settlements(
    state: WriteState,
    namespace: str,
    new_rank: int,
    policy: WritePolicy,
    now: datetime,
    claimed: dict[UUID, tuple[MemoryState, str]],
) -> dict[str, list[Pair]]:
    """The band's contradictions by how the dial settles each: the new memory wins
    (``newer``), the neighbour does (``older``, only under ``auto``: quarantined as step 6
    quarantines a lower rank) or a person decides (``finding``). A neighbour a slot or a
    source ref already contradicts is settled by that claim, the writer's own."""
    band: dict[str, list[Pair]] = {"newer": [], "older": [], "finding": []}
    for pair in sorted(state.judged, key=lambda p: (-p.cosine, str(p.neighbour.id))):
        old = pair.neighbour
        if old.is_current(now) and old.namespace == namespace and old.id not in claimed:
            band[settlement(policy.conflict_review, new_rank, old, same_namespace=True)].append(pair)
    return band


def _next(ids: Iterator[UUID]) -> UUID:
    found = next(ids, None)
    if found is None:
        raise ValueError("the band's contradictions need an id each (review_ids)")
    return found


def _same_value(existing: MemoryState, command: WriteMemory) -> bool:
    """Equal text is a duplicate unless both name a structured value and the values differ."""
    if existing.value is None or command.value is None:
        return True
    return normalize(existing.value) == normalize(command.value)


def _deduplicate(
    existing: MemoryState, provenance: Provenance, classification: Classification, now: datetime
) -> WriteDecision:
    """An equal current memory exists: no new memory. The write is still recorded on the
    memory's stream (its provenance joins, once), which also makes the dedupe decision
    conflict with any concurrent change to that memory."""
    writers = existing.writers | {provenance.actor}
    tier = trust_tier_from(existing.verifications, existing.trust_tier, writers)
    reaffirmed = MemoryReaffirmed(memory_id=existing.id, provenance=provenance, trust_tier=tier, at=now)
    return WriteDecision(
        outcome="deduplicated",
        memory_id=existing.id,
        classification=classification,
        events=(reaffirmed,),
    )


def _quarantine(
    command: WriteMemory,
    identity: Identity,
    provenance: Provenance,
    classification: Classification,
    incumbent: MemoryState,
    valid_from: datetime,
    now: datetime,
    memory_id: UUID,
    dispute_id: UUID,
    reason: str,
    band_judged: tuple[UUID, ...],
) -> WriteDecision:
    """A lower-trust contradiction: stored disputed (invisible) and a dispute opens."""
    written = _memory_written(
        command,
        identity,
        provenance,
        classification,
        valid_from,
        now,
        memory_id,
        status="disputed",
        supersedes=(),
        band_judged=band_judged,
    )
    opened = DisputeOpened(
        dispute_id=dispute_id,
        namespace=identity.namespace,
        memory_id=memory_id,
        incumbent_id=incumbent.id,
        reason=f"{reason}: rank {source_rank(provenance.source)} < incumbent rank {incumbent.rank}",
        at=now,
    )
    return WriteDecision(
        outcome="disputed",
        memory_id=memory_id,
        dispute_id=dispute_id,
        classification=classification,
        events=(written, opened),
    )


def _memory_written(
    command: WriteMemory,
    identity: Identity,
    provenance: Provenance,
    classification: Classification,
    valid_from: datetime,
    now: datetime,
    memory_id: UUID,
    *,
    status: Literal["active", "disputed"],
    supersedes: tuple[UUID, ...],
    band_judged: tuple[UUID, ...],
) -> MemoryWritten:
    return MemoryWritten(
        memory_id=memory_id,
        namespace=identity.namespace,
        actor=identity.actor,
        type=command.type,
        scope=command.scope,
        content=command.content,
        value=command.value,
        subject=command.subject,
        attribute=command.attribute,
        tags=command.tags,
        selectors=command.selectors,
        provenance=(provenance,),
        event_time=command.event_time,
        valid_from=valid_from,
        status=status,
        trust_tier="canonical" if status == "active" else "candidate",
        supersedes=supersedes,
        classification=classification,
        band_judged=band_judged,
        at=now,
    )


def _claim(claim: Claim, holders: tuple[UUID, ...], now: datetime) -> ClaimSet:
    return ClaimSet(claim_id=claim.id, kind=claim.kind, namespace=claim.namespace, holders=holders, at=now)
