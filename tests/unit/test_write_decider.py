"""The write decider (docs/architecture.md section 4, steps 3-6): pure, no I/O, no clock."""

from __future__ import annotations

import pytest

from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import WriteMemory, WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, ProvenanceNotAllowed
from memwarden.domain.model.events import (
    ClaimSet,
    DisputeOpened,
    MemoryReaffirmed,
    MemorySuperseded,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.memory import evolve_memory
from memwarden.domain.model.write import MAX_FIELD_LENGTH, MAX_TAG_LENGTH, MAX_TAGS, WriteState
from tests.unit.builders import (
    ADMIN,
    AGENT,
    AUDITOR,
    DISPUTE_ID,
    MEMBER,
    NEW_ID,
    NS,
    OTHER_AGENT,
    OWNER,
    REF_CLAIM_ID,
    SLOT_CLAIM_ID,
    T0,
    TEXT_CLAIM_ID,
    at,
    claim,
    cmd,
    decide,
    fold_memory,
    ident,
    memory,
    of_type,
    uid,
    write_state,
)

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


def slot_cmd(value: str, **fields: object) -> WriteMemory:
    content = fields.pop("content", f"Dana lives in {value}")
    return cmd(str(content), subject="dana", attribute="city", value=value, **fields)


def slot_memory(value: str, **fields: object):  # type: ignore[no-untyped-def]
    fields.setdefault("content", f"Dana lives in {value}")
    return memory(subject="dana", attribute="city", value=value, **fields)  # type: ignore[arg-type]


# -- storing ------------------------------------------------------------------------------


def test_stores_content_verbatim_with_one_text_claim() -> None:
    content = "  Dana   prefers *tea*, not coffee!  "
    decision = decide(cmd(content, tags=("stakeholder:dana",), selectors=("channel:slack",)))

    assert decision.outcome == "stored"
    assert decision.memory_id == NEW_ID
    assert decision.supersedes == ()
    assert decision.dispute_id is None
    assert decision.rejected == ()
    written, text_claim = decision.events
    assert isinstance(written, MemoryWritten)
    assert written.content == content  # verbatim: not normalized, not trimmed
    assert written.memory_id == NEW_ID
    assert written.namespace == AGENT.namespace
    assert written.actor == AGENT.actor
    assert written.provenance == (Provenance(source="conversation", actor=AGENT.actor),)
    assert written.tags == ("stakeholder:dana",)
    assert written.selectors == ("channel:slack",)
    assert written.status == "active"
    assert written.trust_tier == "canonical"
    assert written.supersedes == ()
    assert written.valid_from == T0
    assert written.at == T0
    assert written.classification == decision.classification == Classification()
    assert text_claim == ClaimSet(claim_id=TEXT_CLAIM_ID, kind="text", namespace=NS, holders=(NEW_ID,), at=T0)


def test_stored_memory_folds_into_a_current_memory() -> None:
    decision = decide(cmd("Dana lives in Lisbon", subject="dana", attribute="city", value="Lisbon"))
    state = fold_memory(None, decision.events, NEW_ID)

    assert state.is_current(T0)
    assert state.status == "active"
    assert state.recorded_at == T0
    assert state.valid_to is None
    assert state.retired_at is None
    assert state.version == 1
    assert state.slot_value == "lisbon"
    assert state.rank == 10
    assert state.writers == frozenset({AGENT.actor})


def test_the_identity_not_the_command_decides_namespace_and_actor() -> None:
    caller = ident("agent", "agent-z", namespace="acme/eng/platform")
    decision = decide(cmd(), identity=caller)
    (written,) = of_type(decision.events, MemoryWritten)
    assert (written.namespace, written.actor) == ("acme/eng/platform", "agent-z")
    assert written.provenance[0].actor == "agent-z"


def test_valid_from_defaults_to_event_time_then_now() -> None:
    event_time = at(-30)
    by_event_time = decide(cmd(event_time=event_time))
    (written,) = of_type(by_event_time.events, MemoryWritten)
    assert written.valid_from == event_time
    assert written.event_time == event_time

    explicit = decide(cmd(event_time=event_time, valid_from=at(-3)))
    (written,) = of_type(explicit.events, MemoryWritten)
    assert written.valid_from == at(-3)

    (written,) = of_type(decide(cmd()).events, MemoryWritten)
    assert written.valid_from == T0
    assert written.event_time is None


def test_classification_is_recorded_on_the_written_fact() -> None:
    decision = decide(cmd("Dana's email is dana@example.com"))
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.classification.pii == ("email",)
    assert written.classification.sensitivity == "confidential"


def test_a_secret_is_stored_when_the_policy_allows_it() -> None:
    decision = decide(cmd(f"The deploy key is {AWS_KEY}"), policy=WritePolicy(forbid_secrets=False))
    assert decision.outcome == "stored"
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.classification.secrets == ("aws_access_key",)
    assert written.classification.sensitivity == "secret"


# -- rejections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "policy", "reasons"),
    [
        ("", WritePolicy(), ["empty"]),
        ("   \n\t  ", WritePolicy(), ["empty"]),
        ("x" * 33, WritePolicy(max_content_bytes=32), ["too_large"]),
        # 11 characters but 22 bytes: the limit counts UTF-8 bytes
        ("ééééé ééééé", WritePolicy(max_content_bytes=20), ["too_large"]),
        ("ok thanks!", WritePolicy(), ["low_information"]),
        ("?!", WritePolicy(), ["low_information"]),
        ("hi", WritePolicy(), ["low_information"]),
        (f"The deploy key is {AWS_KEY}", WritePolicy(), ["secret_forbidden"]),
        ("password: hunter22", WritePolicy(), ["secret_forbidden"]),
        (
            f"Key {AWS_KEY} for Dana " + "x" * 64,
            WritePolicy(max_content_bytes=40),
            ["too_large", "secret_forbidden"],
        ),
    ],
)
def test_rejections_name_every_reason_and_emit_nothing(
    content: str, policy: WritePolicy, reasons: list[str]
) -> None:
    decision = decide(cmd(content), policy=policy)

    assert decision.outcome == "rejected"
    assert [r.reason for r in decision.rejected] == reasons
    assert all(r.detail for r in decision.rejected)
    assert decision.events == ()
    assert decision.memory_id is None
    assert decision.dispute_id is None
    assert decision.classification is not None


def test_size_limit_is_inclusive() -> None:
    assert decide(cmd("y" * 32), policy=WritePolicy(max_content_bytes=32)).outcome == "stored"
    assert decide(cmd("y" * 33), policy=WritePolicy(max_content_bytes=32)).outcome == "rejected"


def test_too_large_detail_names_size_and_limit() -> None:
    decision = decide(cmd("z" * 50), policy=WritePolicy(max_content_bytes=10))
    (rejection,) = decision.rejected
    assert "50" in rejection.detail
    assert "10" in rejection.detail


def test_secret_rejection_names_the_kind() -> None:
    decision = decide(cmd(f"key {AWS_KEY}"))
    (rejection,) = decision.rejected
    assert rejection.reason == "secret_forbidden"
    assert "aws_access_key" in rejection.detail
    assert decision.classification is not None
    assert decision.classification.secrets == ("aws_access_key",)


def test_a_rejected_write_never_dedupes_or_supersedes() -> None:
    incumbent = slot_memory("Porto")
    state = write_state(text=[incumbent], slot=[incumbent])
    decision = decide(cmd("", subject="dana", attribute="city", value="Lisbon"), state)
    assert decision.outcome == "rejected"
    assert decision.events == ()


# -- invalid requests -----------------------------------------------------------------------

LONG = "s" * (MAX_FIELD_LENGTH + 1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"source": "rumour"}, "unknown provenance source"),
        ({"source": "Manual"}, "unknown provenance source"),
        ({"subject": "dana"}, "subject and attribute"),
        ({"attribute": "city"}, "subject and attribute"),
        ({"value": "Lisbon"}, "value needs a slot"),
        ({"subject": LONG, "attribute": "city"}, "subject"),
        ({"subject": "dana", "attribute": LONG}, "attribute"),
        ({"subject": "dana", "attribute": "city", "value": LONG}, "value"),
        ({"subject": "   ", "attribute": "city"}, "subject"),
        ({"subject": "dana", "attribute": "city", "value": " "}, "value"),
        ({"ref": ""}, "provenance.ref"),
        ({"ref": "r" * (MAX_FIELD_LENGTH + 1)}, "provenance.ref"),
        ({"tags": tuple(f"t{i}" for i in range(MAX_TAGS + 1))}, "tags"),
        ({"tags": ("t" * (MAX_TAG_LENGTH + 1),)}, "tags"),
        ({"tags": ("",)}, "tags"),
        ({"selectors": tuple(f"s{i}" for i in range(MAX_TAGS + 1))}, "selectors"),
        ({"selectors": ("s" * (MAX_TAG_LENGTH + 1),)}, "selectors"),
    ],
)
def test_malformed_writes_are_invalid_requests(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message) as raised:
        decide(cmd(**fields))
    assert raised.value.code == "invalid_request"


def test_field_limits_are_inclusive() -> None:
    at_limit = "s" * MAX_FIELD_LENGTH
    decision = decide(
        cmd(
            subject=at_limit,
            attribute=at_limit,
            value=at_limit,
            ref="r" * MAX_FIELD_LENGTH,
            tags=("t" * MAX_TAG_LENGTH, *(f"t{i}" for i in range(MAX_TAGS - 1))),
            selectors=tuple(f"s{i}" for i in range(MAX_TAGS)),
        )
    )
    assert decision.outcome == "stored"


def test_shape_is_checked_even_for_content_that_would_be_rejected() -> None:
    with pytest.raises(InvalidRequest):
        decide(cmd("", subject="dana"))


# -- roles and provenance -------------------------------------------------------------------


def test_an_auditor_may_not_write() -> None:
    with pytest.raises(Forbidden) as raised:
        decide(cmd(), identity=AUDITOR)
    assert raised.value.code == "forbidden"


def test_an_auditor_is_forbidden_before_anything_else_is_checked() -> None:
    with pytest.raises(Forbidden):
        decide(cmd("", source="manual", subject="x"), identity=AUDITOR)


def test_an_agent_may_not_claim_manual_provenance() -> None:
    with pytest.raises(ProvenanceNotAllowed) as raised:
        decide(cmd(source="manual"), identity=AGENT)
    assert raised.value.code == "provenance_not_allowed"


@pytest.mark.parametrize("identity", [MEMBER, ADMIN, OWNER], ids=lambda i: i.role)
def test_people_may_claim_manual_provenance(identity: object) -> None:
    decision = decide(cmd(source="manual", ref="ticket-7"), identity=identity)  # type: ignore[arg-type]
    assert decision.outcome == "stored"
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.provenance == (Provenance(source="manual", actor=identity.actor, ref="ticket-7"),)  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", ["document", "live-fetch", "consolidation", "swap-import", "conversation"])
def test_an_agent_may_claim_every_machine_source(source: str) -> None:
    decision = decide(cmd(source=source))
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.provenance[0].source == source


# -- dedupe -----------------------------------------------------------------------------------


def test_an_equal_current_memory_dedupes_and_reaffirms() -> None:
    existing = memory(content="Dana lives in Lisbon", actor="agent-a")
    decision = decide(
        cmd("  dana LIVES in lisbon. ", source="document", ref="doc-1"),
        write_state(text=[existing]),
        identity=OTHER_AGENT,
    )

    assert decision.outcome == "deduplicated"
    assert decision.memory_id == existing.id
    assert decision.dispute_id is None
    provenance = Provenance(source="document", actor=OTHER_AGENT.actor, ref="doc-1")
    assert decision.events == (
        MemoryReaffirmed(memory_id=existing.id, provenance=provenance, trust_tier="canonical", at=T0),
    )

    folded = fold_memory(existing, decision.events, existing.id)
    assert folded.provenance == (*existing.provenance, provenance)
    assert folded.writers == {"agent-a", OTHER_AGENT.actor}
    assert folded.rank == 40  # the memory's rank is the best of its provenance
    assert folded.version == existing.version + 1
    assert folded.content == existing.content


def test_dedupe_always_reaffirms_but_provenance_joins_once() -> None:
    existing = memory(content="Dana lives in Lisbon", actor=AGENT.actor)
    state = existing
    for _ in range(3):
        decision = decide(cmd("Dana lives in Lisbon"), write_state(text=[state]), identity=AGENT)
        assert decision.outcome == "deduplicated"
        assert len(of_type(decision.events, MemoryReaffirmed)) == 1
        state = fold_memory(state, decision.events, existing.id)

    assert state.provenance == existing.provenance  # the same provenance never joins twice
    assert state.version == existing.version + 3  # but every write is on the stream

    other = decide(cmd("Dana lives in Lisbon"), write_state(text=[state]), identity=OTHER_AGENT)
    state = fold_memory(state, other.events, existing.id)
    twice = decide(cmd("Dana lives in Lisbon"), write_state(text=[state]), identity=OTHER_AGENT)
    state = fold_memory(state, twice.events, existing.id)
    assert [p.actor for p in state.provenance] == [AGENT.actor, OTHER_AGENT.actor]


def test_dedupe_emits_no_new_memory_and_no_claims() -> None:
    existing = memory(content="Dana lives in Lisbon")
    decision = decide(cmd("Dana lives in Lisbon"), write_state(text=[existing]))
    assert of_type(decision.events, MemoryWritten) == []
    assert of_type(decision.events, ClaimSet) == []


@pytest.mark.parametrize(
    "holder_fields",
    [
        {"status": "retired", "retired_at": at(-1)},
        {"retired_at": at(-1)},
        {"valid_to": at(-1)},
        {"valid_to": T0},  # valid_to is exclusive: not valid at exactly that instant
        {"status": "disputed"},
        {"status": "erased", "retired_at": at(-1)},
    ],
    ids=["retired", "retired_at", "valid_to_past", "valid_to_now", "disputed", "erased"],
)
def test_a_non_current_holder_is_not_a_duplicate(holder_fields: dict[str, object]) -> None:
    old = memory(content="Dana lives in Lisbon", **holder_fields)  # type: ignore[arg-type]
    decision = decide(cmd("Dana lives in Lisbon"), write_state(text=[old]))

    assert decision.outcome == "stored"
    assert decision.memory_id == NEW_ID
    assert of_type(decision.events, MemoryReaffirmed) == []
    (text_claim,) = of_type(decision.events, ClaimSet)
    assert text_claim.holders == (NEW_ID,)  # the stale holder leaves the claim
    assert of_type(decision.events, MemorySuperseded) == []


def test_a_holder_still_valid_until_later_is_a_duplicate() -> None:
    old = memory(content="Dana lives in Lisbon", valid_to=at(1))
    assert decide(cmd("Dana lives in Lisbon"), write_state(text=[old])).outcome == "deduplicated"


def test_an_unknown_holder_id_is_ignored() -> None:
    state = WriteState(text_claim=claim("text", [uid()], id=TEXT_CLAIM_ID))
    decision = decide(cmd(), state)
    assert decision.outcome == "stored"
    (text_claim,) = of_type(decision.events, ClaimSet)
    assert text_claim.holders == (NEW_ID,)


# -- slot supersedence ------------------------------------------------------------------------


def test_higher_rank_supersedes_a_slot_holder_with_a_different_value() -> None:
    incumbent = slot_memory("Porto", source="conversation", valid_from=at(-10))
    decision = decide(slot_cmd("Lisbon", source="document", valid_from=at(-2)), write_state(slot=[incumbent]))

    assert decision.outcome == "superseded"
    assert decision.memory_id == NEW_ID
    assert decision.supersedes == (incumbent.id,)
    (written,) = of_type(decision.events, MemoryWritten)
    assert written.supersedes == (incumbent.id,)
    assert written.status == "active"
    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert superseded.memory_id == incumbent.id
    assert superseded.by == NEW_ID
    assert superseded.reason == "slot"
    assert superseded.at == T0
    assert of_type(decision.events, DisputeOpened) == []


def test_equal_rank_the_newer_write_wins() -> None:
    incumbent = slot_memory("Porto", source="document", valid_from=at(-10))
    decision = decide(slot_cmd("Lisbon", source="live-fetch"), write_state(slot=[incumbent]))
    assert decision.outcome == "superseded"
    assert decision.supersedes == (incumbent.id,)

    same_source = decide(slot_cmd("Faro"), write_state(slot=[slot_memory("Porto")]))
    assert same_source.outcome == "superseded"


def test_manual_by_a_member_supersedes_a_document() -> None:
    incumbent = slot_memory("Porto", source="document")
    decision = decide(slot_cmd("Lisbon", source="manual"), write_state(slot=[incumbent]), identity=MEMBER)
    assert decision.outcome == "superseded"


def test_succession_closes_valid_time_and_keeps_the_old_fact_believed() -> None:
    incumbent = slot_memory("Porto", valid_from=at(-100))
    moved = at(-20)
    decision = decide(slot_cmd("Lisbon", valid_from=moved), write_state(slot=[incumbent]))

    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert superseded.kind == "succession"
    assert superseded.valid_to == moved

    old = fold_memory(incumbent, decision.events, incumbent.id)
    assert old.valid_to == moved
    assert old.status == "active"
    assert old.retired_at is None
    assert old.superseded_by == (NEW_ID,)
    assert not old.is_current(T0)  # no longer valid now
    assert old.is_current(at(-21))  # but it was valid before the move

    new = fold_memory(None, decision.events, NEW_ID)
    assert new.is_current(T0)
    assert new.supersedes == (incumbent.id,)


@pytest.mark.parametrize("new_valid_from", [at(-100), at(-150)], ids=["same", "earlier"])
def test_correction_retires_the_old_fact_in_system_time(new_valid_from: object) -> None:
    incumbent = slot_memory("Porto", valid_from=at(-100))
    decision = decide(slot_cmd("Lisbon", valid_from=new_valid_from), write_state(slot=[incumbent]))

    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert superseded.kind == "correction"
    assert superseded.valid_to is None

    old = fold_memory(incumbent, decision.events, incumbent.id)
    assert old.status == "retired"
    assert old.retired_at == T0
    assert old.valid_to is None
    assert old.superseded_by == (NEW_ID,)
    assert not old.is_current(T0)


def test_a_write_without_valid_time_after_an_older_fact_is_a_succession_at_now() -> None:
    incumbent = slot_memory("Porto", valid_from=at(-5))
    decision = decide(slot_cmd("Lisbon"), write_state(slot=[incumbent]))
    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert (superseded.kind, superseded.valid_to) == ("succession", T0)


def test_the_same_value_in_the_slot_is_not_a_contradiction() -> None:
    incumbent = slot_memory("Lisbon", content="Dana lives in Lisbon")
    decision = decide(
        slot_cmd(" lisbon.", content="Dana moved to Lisbon last year"), write_state(slot=[incumbent])
    )

    assert decision.outcome == "stored"
    assert decision.supersedes == ()
    assert of_type(decision.events, MemorySuperseded) == []
    slot_claim = next(c for c in of_type(decision.events, ClaimSet) if c.kind == "slot")
    assert slot_claim.holders == (incumbent.id, NEW_ID)


def test_without_a_value_the_slot_compares_normalized_content() -> None:
    incumbent = memory(subject="dana", attribute="city", content="Lisbon")
    same = decide(cmd("LISBON!", subject="dana", attribute="city"), write_state(slot=[incumbent]))
    assert same.outcome == "stored"
    different = decide(cmd("Porto", subject="dana", attribute="city"), write_state(slot=[incumbent]))
    assert different.outcome == "superseded"


def test_non_current_slot_holders_are_neither_contradicted_nor_kept() -> None:
    closed = slot_memory("Porto", valid_to=at(-1))
    retired = slot_memory("Faro", status="retired", retired_at=at(-2))
    decision = decide(slot_cmd("Lisbon"), write_state(slot=[closed, retired]))

    assert decision.outcome == "stored"
    assert of_type(decision.events, MemorySuperseded) == []
    slot_claim = next(c for c in of_type(decision.events, ClaimSet) if c.kind == "slot")
    assert slot_claim.holders == (NEW_ID,)


def test_every_contradicting_holder_is_superseded_when_the_new_rank_is_enough() -> None:
    low = slot_memory("Porto", source="conversation")
    high = slot_memory("Faro", source="document")
    agreeing = slot_memory("Lisbon", content="Dana is in Lisbon")
    decision = decide(slot_cmd("Lisbon", source="live-fetch"), write_state(slot=[low, high, agreeing]))

    assert decision.outcome == "superseded"
    assert set(decision.supersedes) == {low.id, high.id}
    assert {e.memory_id for e in of_type(decision.events, MemorySuperseded)} == {low.id, high.id}
    slot_claim = next(c for c in of_type(decision.events, ClaimSet) if c.kind == "slot")
    assert slot_claim.holders == (agreeing.id, NEW_ID)


# -- source_ref supersedence --------------------------------------------------------------


def test_a_refresh_from_the_same_source_ref_supersedes() -> None:
    ref = "https://wiki.example/oncall"
    incumbent = memory(content="On-call is Dana", provenance=(Provenance("live-fetch", "agent-a", ref),))
    decision = decide(cmd("On-call is Eli", source="live-fetch", ref=ref), write_state(ref=[incumbent]))

    assert decision.outcome == "superseded"
    assert decision.supersedes == (incumbent.id,)
    (superseded,) = of_type(decision.events, MemorySuperseded)
    assert superseded.reason == "source_ref"
    assert superseded.memory_id == incumbent.id
    ref_claim = next(c for c in of_type(decision.events, ClaimSet) if c.kind == "source_ref")
    assert ref_claim == ClaimSet(
        claim_id=REF_CLAIM_ID, kind="source_ref", namespace=NS, holders=(NEW_ID,), at=T0
    )


def test_a_source_ref_holder_raised_by_manual_provenance_is_disputed_not_superseded() -> None:
    ref = "https://wiki.example/oncall"
    incumbent = memory(
        content="On-call is Dana",
        provenance=(Provenance("live-fetch", "agent-a", ref), Provenance("manual", "member-m")),
    )
    decision = decide(cmd("On-call is Eli", source="live-fetch", ref=ref), write_state(ref=[incumbent]))
    assert decision.outcome == "disputed"
    (opened,) = of_type(decision.events, DisputeOpened)
    assert opened.reason.startswith("source_ref")
    assert opened.incumbent_id == incumbent.id


# -- lower-rank contradictions: disputes -----------------------------------------------------


def test_a_lower_rank_contradiction_is_quarantined_and_opens_a_dispute() -> None:
    incumbent = slot_memory("Porto", source="document")
    decision = decide(slot_cmd("Lisbon", source="conversation"), write_state(slot=[incumbent]))

    assert decision.outcome == "disputed"
    assert decision.memory_id == NEW_ID
    assert decision.dispute_id == DISPUTE_ID
    assert decision.supersedes == ()
    written, opened = decision.events
    assert isinstance(written, MemoryWritten)
    assert written.status == "disputed"
    assert written.trust_tier == "candidate"
    assert written.supersedes == ()
    assert isinstance(opened, DisputeOpened)
    assert opened.dispute_id == DISPUTE_ID
    assert opened.memory_id == NEW_ID
    assert opened.incumbent_id == incumbent.id
    assert opened.namespace == NS
    assert opened.at == T0
    assert opened.reason == "slot: rank 10 < incumbent rank 40"
    # nothing is closed, and no claim moves: the quarantined memory holds nothing
    assert of_type(decision.events, MemorySuperseded) == []
    assert of_type(decision.events, ClaimSet) == []

    quarantined = fold_memory(None, decision.events, NEW_ID)
    assert quarantined.status == "disputed"
    assert quarantined.trust_tier == "candidate"
    assert not quarantined.is_current(T0)


def test_reaffirmed_provenance_raises_the_incumbent_rank() -> None:
    incumbent = slot_memory(
        "Porto",
        provenance=(Provenance("conversation", "agent-a"), Provenance("document", "agent-c")),
    )
    decision = decide(slot_cmd("Lisbon", source="consolidation"), write_state(slot=[incumbent]))
    assert decision.outcome == "disputed"


def test_the_dispute_names_the_strongest_incumbent() -> None:
    weak = slot_memory("Porto", source="conversation")
    strong = slot_memory("Faro", source="document", recorded_at=at(-30))
    strong_newer = slot_memory("Braga", source="live-fetch", recorded_at=at(-3))
    decision = decide(
        slot_cmd("Lisbon", source="consolidation"), write_state(slot=[weak, strong_newer, strong])
    )
    assert decision.outcome == "disputed"
    (opened,) = of_type(decision.events, DisputeOpened)
    assert opened.incumbent_id == strong_newer.id  # equal rank: the newer one
    assert "rank 30 < incumbent rank 40" in opened.reason


# -- claims ---------------------------------------------------------------------------------


def test_claims_emitted_for_text_slot_and_source_ref() -> None:
    decision = decide(
        cmd("Dana lives in Lisbon", subject="dana", attribute="city", value="Lisbon", ref="doc-1"),
        write_state(slot=[], ref=[]),
    )
    claims = of_type(decision.events, ClaimSet)
    assert [(c.claim_id, c.kind, c.holders) for c in claims] == [
        (TEXT_CLAIM_ID, "text", (NEW_ID,)),
        (SLOT_CLAIM_ID, "slot", (NEW_ID,)),
        (REF_CLAIM_ID, "source_ref", (NEW_ID,)),
    ]
    assert all(c.namespace == NS and c.at == T0 for c in claims)


def test_no_slot_or_ref_claim_without_a_slot_or_ref() -> None:
    claims = of_type(decide(cmd()).events, ClaimSet)
    assert [c.kind for c in claims] == ["text"]


def test_a_superseding_write_takes_over_the_slot_claim() -> None:
    incumbent = slot_memory("Porto")
    decision = decide(slot_cmd("Lisbon", source="document"), write_state(slot=[incumbent]))
    slot_claim = next(c for c in of_type(decision.events, ClaimSet) if c.kind == "slot")
    assert slot_claim.holders == (NEW_ID,)


def test_event_order_is_written_then_superseded_then_claims() -> None:
    incumbent = slot_memory("Porto")
    decision = decide(slot_cmd("Lisbon", source="document"), write_state(slot=[incumbent]))
    assert [type(e).__name__ for e in decision.events] == [
        "MemoryWritten",
        "MemorySuperseded",
        "ClaimSet",
        "ClaimSet",
    ]


def test_evolve_memory_rejects_events_before_written() -> None:
    event = MemoryReaffirmed(memory_id=uid(), provenance=Provenance("conversation", "a"), at=T0)
    with pytest.raises((TypeError, ValueError), match="before MemoryWritten"):
        evolve_memory(None, event)


def test_equal_text_with_another_structured_value_is_not_a_duplicate() -> None:
    existing = memory(
        content="Dana's city", subject="dana", attribute="city", value="Lisbon", actor="agent-a"
    )
    decision = decide(
        cmd("Dana's city", subject="dana", attribute="city", value="Porto"),
        write_state(text=[existing], slot=[existing]),
        identity=OTHER_AGENT,
    )
    assert decision.outcome == "superseded"
    assert decision.supersedes == (existing.id,)
