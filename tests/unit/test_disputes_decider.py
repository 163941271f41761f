"""The dispute-resolution decider (docs/architecture.md section 4, Disputes)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import pytest

from memwarden.domain.model.commands import ResolveDispute, WritePolicy
from memwarden.domain.model.disputes import ResolveState, decide_resolve
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import (
    ClaimSet,
    DisputeDecision,
    DisputeResolved,
    Event,
    MemoryReleased,
    MemoryRetired,
    MemorySuperseded,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import DisputeState, MemoryState, evolve_dispute
from tests.unit.builders import (
    ADMIN,
    AGENT,
    AUDITOR,
    MEMBER,
    NS,
    OWNER,
    POLICY,
    T0,
    Store,
    at,
    claim,
    cmd,
    ident,
    memory,
    of_type,
    slot_claim_id,
    text_claim_id,
    uid,
)

NOW = at(1)
REPLACEMENT = UUID(int=300)
DECISIONS: tuple[DisputeDecision, ...] = ("uphold_new", "keep_old", "edit", "both_valid")


class Scenario:
    """A real quarantine: a document-sourced incumbent, then a lower-rank contradiction."""

    def __init__(self, *, new_valid_from: datetime | None = None, namespace: str = NS) -> None:
        self.store = Store()
        writer = ident("agent", "agent-a", namespace=namespace)
        first = self.store.write(
            cmd(
                "Dana lives in Porto",
                subject="dana",
                attribute="city",
                value="Porto",
                source="document",
                valid_from=at(-100),
            ),
            identity=writer,
            now=at(-50),
        )
        second = self.store.write(
            cmd(
                "Dana lives in Lisbon",
                subject="dana",
                attribute="city",
                value="Lisbon",
                valid_from=new_valid_from or at(-10),
            ),
            identity=ident("agent", "agent-b", namespace=namespace),
            now=T0,
        )
        assert first.outcome == "stored"
        assert second.outcome == "disputed"
        assert first.memory_id is not None
        assert second.memory_id is not None
        assert second.dispute_id is not None
        self.namespace = namespace
        self.incumbent_id: UUID = first.memory_id
        self.new_id: UUID = second.memory_id
        self.dispute_id: UUID = second.dispute_id

    @property
    def incumbent(self) -> MemoryState:
        return self.store.memories[self.incumbent_id]

    @property
    def new(self) -> MemoryState:
        return self.store.memories[self.new_id]

    @property
    def dispute(self) -> DisputeState:
        return self.store.disputes[self.dispute_id]

    def state(self, text_of: str | None = None) -> ResolveState:
        new = self.new
        text = text_of if text_of is not None else new.content or ""
        return ResolveState(
            dispute=self.dispute,
            new=new,
            incumbent=self.incumbent,
            slot_claim=self.store.claim(
                slot_claim_id("dana", "city", self.namespace), "slot", self.namespace
            ),
            text_claim=self.store.claim(text_claim_id(text, self.namespace), "text", self.namespace),
            holders=dict(self.store.memories),
        )

    def resolve(
        self,
        decision: DisputeDecision,
        reviewer: Identity = ADMIN,
        *,
        content: str | None = None,
        value: str | None = None,
        reason: str | None = None,
        policy: WritePolicy = POLICY,
        now: datetime = NOW,
        apply: bool = True,
    ) -> tuple[Event, ...]:
        command = ResolveDispute(
            dispute_id=self.dispute_id, decision=decision, content=content, value=value, reason=reason
        )
        events = decide_resolve(command, reviewer, self.state(content), policy, now, REPLACEMENT)
        if apply:
            self.store.apply(events)
        return events

    def slot_holders(self) -> tuple[UUID, ...]:
        return self.store.claim(slot_claim_id("dana", "city", self.namespace), "slot").holders


def test_the_scenario_quarantines_the_new_memory() -> None:
    s = Scenario()
    assert s.new.status == "disputed"
    assert s.new.trust_tier == "candidate"
    assert s.incumbent.is_current(NOW)
    assert s.dispute.status == "open"
    assert (s.dispute.memory_id, s.dispute.incumbent_id) == (s.new_id, s.incumbent_id)
    assert s.slot_holders() == (s.incumbent_id,)


# -- uphold_new -----------------------------------------------------------------------------


def test_uphold_new_releases_the_new_memory_and_supersedes_the_incumbent() -> None:
    s = Scenario()
    events = s.resolve("uphold_new", reason="Dana confirmed the move")

    released, superseded, text_claim, slot_claim, resolved = events
    assert released == MemoryReleased(
        memory_id=s.new_id, dispute_id=s.dispute_id, supersedes=(s.incumbent_id,), at=NOW
    )
    assert isinstance(superseded, MemorySuperseded)
    assert superseded.memory_id == s.incumbent_id
    assert superseded.by == s.new_id
    assert superseded.reason == "dispute:uphold_new"
    assert superseded.kind == "succession"  # the new fact is valid from later on
    assert superseded.valid_to == at(-10)
    assert isinstance(text_claim, ClaimSet)
    assert (text_claim.kind, text_claim.holders) == ("text", (s.new_id,))
    assert isinstance(slot_claim, ClaimSet)
    assert (slot_claim.kind, slot_claim.holders) == ("slot", (s.new_id,))
    assert resolved == DisputeResolved(
        dispute_id=s.dispute_id,
        decision="uphold_new",
        reviewer=ADMIN.actor,
        reason="Dana confirmed the move",
        replacement_id=None,
        at=NOW,
    )

    assert s.new.status == "active"
    assert s.new.trust_tier == "canonical"
    assert s.new.supersedes == (s.incumbent_id,)
    assert s.new.is_current(NOW)
    assert s.incumbent.valid_to == at(-10)
    assert s.incumbent.superseded_by == (s.new_id,)
    assert s.incumbent.retired_at is None
    assert not s.incumbent.is_current(NOW)
    assert s.dispute.status == "resolved"
    assert s.dispute.decision == "uphold_new"
    assert s.dispute.reviewer == ADMIN.actor
    assert s.dispute.resolved_at == NOW
    assert s.dispute.replacement_id is None
    assert s.slot_holders() == (s.new_id,)


def test_uphold_new_as_a_correction_retires_the_incumbent() -> None:
    s = Scenario(new_valid_from=at(-100))  # same valid_from: we were wrong
    s.resolve("uphold_new")
    assert s.incumbent.status == "retired"
    assert s.incumbent.retired_at == NOW
    assert s.incumbent.superseded_by == (s.new_id,)
    assert s.new.is_current(NOW)


def test_uphold_new_when_the_incumbent_is_gone_supersedes_nothing() -> None:
    s = Scenario()
    # the incumbent was retired for other reasons meanwhile
    s.store.apply([MemoryRetired(memory_id=s.incumbent_id, reason="erased", at=at(0.5))])
    events = s.resolve("uphold_new")

    assert of_type(events, MemorySuperseded) == []
    (released,) = of_type(events, MemoryReleased)
    assert released.supersedes == ()
    assert s.new.is_current(NOW)
    assert s.new.supersedes == ()


def test_uphold_new_never_leaves_two_current_values_in_the_slot() -> None:
    """docs/architecture.md section 4 step 6: a slot with a different value is always settled.

    Here the incumbent was superseded by a third memory while the dispute was open, so the
    slot's current holder is that third memory. Upholding the quarantined memory must not
    leave both active with different values (it should supersede the current holder, or
    refuse as stale).
    """
    s = Scenario()
    third = s.store.write(
        cmd("Dana lives in Faro", subject="dana", attribute="city", value="Faro", source="manual"),
        identity=MEMBER,
        now=at(0.5),
    )
    assert third.outcome == "superseded"
    assert third.memory_id is not None
    assert not s.incumbent.is_current(NOW)

    try:
        s.resolve("uphold_new")
    except InvalidState:
        return  # refusing a stale dispute is acceptable
    current_values = {
        s.store.memories[h].slot_value for h in s.slot_holders() if s.store.memories[h].is_current(NOW)
    }
    assert len(current_values) == 1, f"two current values in one slot: {sorted(current_values)}"


# -- keep_old -------------------------------------------------------------------------------


def test_keep_old_retires_the_new_memory_with_the_reason() -> None:
    s = Scenario()
    events = s.resolve("keep_old", reason="Dana still lives in Porto")

    retired, resolved = events
    assert retired == MemoryRetired(
        memory_id=s.new_id,
        reason="Dana still lives in Porto",
        dispute_id=s.dispute_id,
        kept=s.incumbent_id,
        at=NOW,
    )
    assert isinstance(resolved, DisputeResolved)
    assert resolved.decision == "keep_old"
    assert resolved.replacement_id is None
    assert of_type(events, ClaimSet) == []

    assert s.new.status == "retired"
    assert s.new.retired_at == NOW
    assert not s.new.is_current(NOW)
    assert s.incumbent.is_current(NOW)
    assert s.incumbent.superseded_by == ()
    assert s.dispute.decision == "keep_old"
    assert s.slot_holders() == (s.incumbent_id,)


def test_keep_old_has_a_default_reason() -> None:
    s = Scenario()
    (retired,) = of_type(s.resolve("keep_old"), MemoryRetired)
    assert retired.reason == "rejected in review"


# -- edit -----------------------------------------------------------------------------------


def test_edit_writes_a_manual_replacement_and_retires_the_quarantined_memory() -> None:
    s = Scenario()
    events = s.resolve("edit", content="Dana lives in Lisbon since May", value="Lisbon", reason="fixed")

    written, retired, superseded, text_claim, slot_claim, resolved = events
    assert isinstance(written, MemoryWritten)
    assert written.memory_id == REPLACEMENT
    assert written.content == "Dana lives in Lisbon since May"
    assert written.value == "Lisbon"
    assert (written.subject, written.attribute) == ("dana", "city")
    assert written.namespace == NS
    assert written.actor == ADMIN.actor
    assert written.provenance == (
        Provenance(source="manual", actor=ADMIN.actor, ref=f"dispute:{s.dispute_id}"),
    )
    assert written.status == "active"
    assert written.trust_tier == "canonical"
    assert written.supersedes == (s.new_id, s.incumbent_id)  # the quarantined draft, then the incumbent
    assert written.valid_from == at(-10)  # the quarantined fact's valid time
    assert written.reason == "dispute:edit"
    assert isinstance(retired, MemoryRetired)
    assert retired.memory_id == s.new_id
    assert retired.dispute_id == s.dispute_id
    assert retired.replaced_by == REPLACEMENT
    assert isinstance(superseded, MemorySuperseded)
    assert (superseded.memory_id, superseded.by) == (s.incumbent_id, REPLACEMENT)
    assert superseded.reason == "dispute:edit"
    assert isinstance(text_claim, ClaimSet)
    assert text_claim.holders == (REPLACEMENT,)
    assert text_claim.claim_id == text_claim_id("Dana lives in Lisbon since May")
    assert isinstance(slot_claim, ClaimSet)
    assert slot_claim.holders == (REPLACEMENT,)
    assert isinstance(resolved, DisputeResolved)
    assert resolved.decision == "edit"
    assert resolved.replacement_id == REPLACEMENT

    replacement = s.store.memories[REPLACEMENT]
    assert replacement.is_current(NOW)
    assert replacement.rank == 50
    assert s.new.status == "retired"
    assert not s.incumbent.is_current(NOW)
    assert s.dispute.replacement_id == REPLACEMENT
    assert s.slot_holders() == (REPLACEMENT,)


def test_edit_keeps_the_quarantined_value_when_none_is_given() -> None:
    s = Scenario()
    (written,) = of_type(s.resolve("edit", content="Dana lives in Lisbon now"), MemoryWritten)
    assert written.value == "Lisbon"


def test_edit_needs_content() -> None:
    s = Scenario()
    with pytest.raises(InvalidRequest, match="needs content"):
        s.resolve("edit")
    assert s.dispute.status == "open"


@pytest.mark.parametrize(
    "content",
    ["", "   ", "ok", "The key is AKIAIOSFODNN7EXAMPLE", "password: hunter22"],
    ids=["empty", "blank", "low_information", "aws_key", "password"],
)
def test_edit_content_is_verified_like_a_write(content: str) -> None:
    s = Scenario()
    with pytest.raises(InvalidRequest):
        s.resolve("edit", content=content)


def test_edit_content_over_the_size_limit_is_refused() -> None:
    s = Scenario()
    with pytest.raises(InvalidRequest, match="bytes"):
        s.resolve("edit", content="Dana lives in Lisbon " * 5, policy=WritePolicy(max_content_bytes=20))


def test_edit_with_a_secret_is_allowed_when_policy_allows_secrets() -> None:
    s = Scenario()
    events = s.resolve(
        "edit", content="Dana's key is AKIAIOSFODNN7EXAMPLE", policy=WritePolicy(forbid_secrets=False)
    )
    (written,) = of_type(events, MemoryWritten)
    assert written.classification.secrets == ("aws_access_key",)


@pytest.mark.parametrize("decision", ["uphold_new", "keep_old", "both_valid"])
def test_content_is_only_for_edit(decision: DisputeDecision) -> None:
    s = Scenario()
    with pytest.raises(InvalidRequest, match="only for the 'edit'"):
        s.resolve(decision, content="Dana lives in Faro")


# -- both_valid -----------------------------------------------------------------------------


def test_both_valid_releases_the_new_memory_and_keeps_the_incumbent() -> None:
    s = Scenario()
    events = s.resolve("both_valid")

    released, text_claim, slot_claim, resolved = events
    assert released == MemoryReleased(memory_id=s.new_id, dispute_id=s.dispute_id, supersedes=(), at=NOW)
    assert isinstance(text_claim, ClaimSet)
    assert text_claim.holders == (s.new_id,)
    assert isinstance(slot_claim, ClaimSet)
    assert slot_claim.holders == (s.incumbent_id, s.new_id)
    assert isinstance(resolved, DisputeResolved)
    assert resolved.decision == "both_valid"
    assert of_type(events, MemorySuperseded) == []

    assert s.new.is_current(NOW)
    assert s.new.trust_tier == "canonical"
    assert s.incumbent.is_current(NOW)
    assert s.incumbent.superseded_by == ()


# -- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("first", DECISIONS)
@pytest.mark.parametrize("second", DECISIONS)
def test_a_dispute_is_resolved_once(first: DisputeDecision, second: DisputeDecision) -> None:
    s = Scenario()
    s.resolve(first, content="Dana lives in Lisbon, confirmed" if first == "edit" else None)
    assert s.dispute.status == "resolved"
    with pytest.raises(InvalidState, match="already resolved"):
        s.resolve(second, content="Dana lives in Braga" if second == "edit" else None)


@pytest.mark.parametrize("reviewer", [AGENT, MEMBER, AUDITOR], ids=lambda i: i.role)
def test_only_admins_and_owners_resolve(reviewer: Identity) -> None:
    s = Scenario()
    with pytest.raises(Forbidden):
        s.resolve("uphold_new", reviewer)
    assert s.dispute.status == "open"


def test_an_owner_resolves() -> None:
    s = Scenario()
    (resolved,) = of_type(s.resolve("keep_old", OWNER), DisputeResolved)
    assert resolved.reviewer == OWNER.actor


def test_an_admin_of_an_ancestor_namespace_resolves() -> None:
    s = Scenario(namespace="acme/eng/platform")
    s.resolve("uphold_new", ident("admin", "root-admin", namespace="acme"))
    assert s.dispute.status == "resolved"


@pytest.mark.parametrize(
    "namespace", ["acme/sales", "acme/eng/platform", "acme/engineering", "globex", "globex/eng"]
)
def test_a_dispute_outside_the_reviewers_subtree_is_not_found(namespace: str) -> None:
    s = Scenario(namespace="acme/eng")
    with pytest.raises(NotFound):
        s.resolve("uphold_new", ident("admin", "admin-elsewhere", namespace=namespace))
    assert s.dispute.status == "open"


def test_outside_the_subtree_is_not_found_even_for_a_non_reviewer() -> None:
    """No leak: a caller outside the subtree learns nothing, not even "forbidden"."""
    s = Scenario(namespace="acme/eng")
    with pytest.raises(NotFound):
        s.resolve("uphold_new", ident("agent", "agent-elsewhere", namespace="acme/sales"))


def test_a_missing_dispute_is_not_found() -> None:
    command = ResolveDispute(dispute_id=uid(), decision="keep_old")
    with pytest.raises(NotFound):
        decide_resolve(command, ADMIN, ResolveState(dispute=None), POLICY, NOW, REPLACEMENT)


@pytest.mark.parametrize("missing", ["new", "incumbent"])
def test_missing_memories_are_an_invalid_state(missing: str) -> None:
    s = Scenario()
    state = s.state()
    state = ResolveState(
        dispute=state.dispute,
        new=None if missing == "new" else state.new,
        incumbent=None if missing == "incumbent" else state.incumbent,
    )
    command = ResolveDispute(dispute_id=s.dispute_id, decision="uphold_new")
    with pytest.raises(InvalidState):
        decide_resolve(command, ADMIN, state, POLICY, NOW, REPLACEMENT)


# -- evolve_dispute -------------------------------------------------------------------------


def test_evolve_dispute_refuses_a_resolution_without_an_opened_dispute() -> None:
    resolved = DisputeResolved(dispute_id=uid(), decision="keep_old", reviewer="x", at=T0)
    with pytest.raises((TypeError, ValueError)):
        evolve_dispute(None, resolved)


def test_evolve_dispute_counts_versions() -> None:
    s = Scenario()
    assert s.dispute.version == 1
    assert s.dispute.opened_at == T0
    s.resolve("keep_old")
    assert s.dispute.version == 2


def test_both_valid_keeps_unrelated_slot_holders() -> None:
    s = Scenario()
    agreeing = memory(subject="dana", attribute="city", value="Porto", content="Dana is in Porto")
    s.store.add(agreeing)
    slot_id = slot_claim_id("dana", "city")
    s.store.claims[slot_id] = claim("slot", (s.incumbent_id, agreeing.id), id=slot_id, version=2)
    (_, _, slot_claim, _) = s.resolve("both_valid")
    assert isinstance(slot_claim, ClaimSet)
    assert slot_claim.holders == (s.incumbent_id, agreeing.id, s.new_id)
