"""Properties of the pure domain model, checked with hypothesis (no I/O, no clock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memwarden.domain.model.classification import classify
from memwarden.domain.model.commands import VerifyMemory, WritePolicy
from memwarden.domain.model.events import ClaimSet, MemoryEvent
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState, evolve_claim, evolve_memory
from memwarden.domain.model.namespaces import ancestors, is_within, subtree_like_pattern, validate_namespace
from memwarden.domain.model.text import is_low_information, normalize
from memwarden.domain.model.trust import SOURCE_RANKS
from memwarden.domain.model.verification import decide_verify
from memwarden.domain.model.write import WriteDecision
from tests.unit.builders import (
    NS,
    T0,
    Store,
    cmd,
    decide,
    ident,
    memory,
    slot_claim_id,
)
from tests.unit.test_text_and_namespaces import like

SOURCES = sorted(SOURCE_RANKS)
VALUES = ["Lisbon", "Porto", "Faro", "Braga"]
PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class SlotWrite:
    value: str
    source: str
    actor: str
    note: int | None  # None: the content is exactly "Dana lives in <value>" (dedupes)
    ref: str | None
    valid_offset_days: int | None  # relative to the write's now; None: no valid time given
    advance_hours: int


def slot_writes(*, future: bool) -> st.SearchStrategy[list[SlotWrite]]:
    offsets = st.integers(-400, 400 if future else 0)
    write = st.builds(
        SlotWrite,
        value=st.sampled_from(VALUES),
        source=st.sampled_from(SOURCES),
        actor=st.sampled_from(["a", "b", "c"]),
        note=st.one_of(st.none(), st.integers(0, 3)),
        ref=st.sampled_from([None, None, "r1", "r2"]),
        valid_offset_days=st.one_of(st.none(), offsets),
        advance_hours=st.integers(0, 24 * 30),
    )
    return st.lists(write, min_size=1, max_size=12)


def identity_for(step: SlotWrite) -> Identity:
    return ident("member" if step.source == "manual" else "agent", f"{step.source}-{step.actor}")


def run_slot_writes(
    steps: list[SlotWrite], *, check: bool = True
) -> tuple[Store, list[WriteDecision], datetime]:
    store = Store()
    now = T0
    decisions = []
    for step in steps:
        now += timedelta(hours=step.advance_hours)
        content = f"Dana lives in {step.value}"
        if step.note is not None:
            content += f" (note {step.note})"
        valid_from = None if step.valid_offset_days is None else now + timedelta(days=step.valid_offset_days)
        command = cmd(
            content,
            subject="Dana",
            attribute="city",
            value=step.value,
            source=step.source,
            ref=step.ref,
            valid_from=valid_from,
        )
        decisions.append(store.write(command, identity_for(step), now=now))
        if check:
            check_slot_invariants(store, now)
    return store, decisions, now


def check_slot_invariants(store: Store, now: datetime) -> None:
    valid_now = [m for m in store.current(now) if m.valid_from <= now]
    values = {m.slot_value for m in valid_now}
    assert len(values) <= 1, f"several current values in one slot: {sorted(values)}"
    holders = store.claim(slot_claim_id("Dana", "city"), "slot").holders
    for m in store.current(now):
        assert m.id in holders, "a current memory of the slot is missing from its claim"


@PROPERTY_SETTINGS
@given(slot_writes(future=False))
def test_one_slot_never_holds_two_current_values(steps: list[SlotWrite]) -> None:
    store, decisions, now = run_slot_writes(steps)

    for decision in decisions:
        assert decision.outcome in {"stored", "deduplicated", "superseded", "disputed"}
        written = [e for e in decision.events if type(e).__name__ == "MemoryWritten"]
        if decision.outcome == "deduplicated":
            assert written == []
        else:
            assert len(written) == 1
    # a disputed memory is never current, and every dispute names a known incumbent
    for dispute in store.disputes.values():
        assert not store.memories[dispute.memory_id].is_current(now)
        assert dispute.incumbent_id in store.memories


def test_a_future_succession_keeps_one_current_value_in_the_slot() -> None:
    """The counterexample hypothesis finds when valid times may lie in the future.

    A succession whose valid_from is still ahead closes the incumbent's valid_to in the
    future, so the incumbent stays current, yet ``decide_write`` drops it from the slot
    claim. Later writes no longer see it: correcting the successor leaves the old value
    and the new one both current in the same slot.
    """
    steps = [
        SlotWrite("Lisbon", "conversation", "a", None, None, None, 0),
        SlotWrite("Porto", "conversation", "a", None, None, 30, 1),  # moves in 30 days
        SlotWrite("Faro", "conversation", "a", None, None, None, 1),  # corrects "Porto"
    ]
    store, decisions, now = run_slot_writes(steps, check=False)
    assert [d.outcome for d in decisions] == ["stored", "superseded", "superseded"]
    lisbon, porto, faro = (store.memories[d.memory_id] for d in decisions if d.memory_id)
    assert porto.status == "retired"  # corrected by "Faro"
    assert faro.is_current(now)
    assert not lisbon.is_current(now), (
        f"'Lisbon' is still current (valid_to {lisbon.valid_to}) next to 'Faro': "
        "the slot holds two current values"
    )


@PROPERTY_SETTINGS
@given(slot_writes(future=False))
def test_folding_is_deterministic(steps: list[SlotWrite]) -> None:
    store, _, _ = run_slot_writes(steps)
    replay_a, replay_b = Store(), Store()
    replay_a.apply(store.log)
    replay_b.apply(store.log)

    assert replay_a.memories == replay_b.memories == store.memories
    assert replay_a.claims == replay_b.claims == store.claims
    assert replay_a.disputes == replay_b.disputes == store.disputes
    for memory_id, state in store.memories.items():
        events = [e for e in store.log if isinstance(e, MemoryEvent) and e.memory_id == memory_id]
        assert state.version == len(events)
    for claim_id, claim in store.claims.items():
        assert claim.version == sum(
            1 for e in store.log if isinstance(e, ClaimSet) and e.claim_id == claim_id
        )


@PROPERTY_SETTINGS
@given(slot_writes(future=False))
def test_evolve_never_mutates_earlier_states(steps: list[SlotWrite]) -> None:
    store, _, _ = run_slot_writes(steps)
    states: dict[object, MemoryState] = {}
    snapshots = []
    for event in store.log:
        if isinstance(event, MemoryEvent):
            before = states.get(event.memory_id)
            snapshot = None if before is None else (before, before.version, before.provenance)
            states[event.memory_id] = evolve_memory(before, event)
            snapshots.append(snapshot)
        elif isinstance(event, ClaimSet):
            assert evolve_claim(None, event).holders == event.holders
    for snapshot in snapshots:
        if snapshot is not None:
            state, version, provenance = snapshot
            assert (state.version, state.provenance) == (version, provenance)


# -- dedupe ---------------------------------------------------------------------------------

contents = st.text(min_size=1, max_size=200)


@PROPERTY_SETTINGS
@given(contents, st.sampled_from(["", " ", "  ", "\n"]), st.sampled_from(["", ".", "!", "  "]))
def test_an_equal_text_dedupes(content: str, prefix: str, suffix: str) -> None:
    store = Store()
    first = store.write(cmd(content), now=T0)
    if first.outcome == "rejected":
        assert first.events == ()
        return
    again = store.write(cmd(prefix + content.upper() + suffix), ident("agent", "agent-b"), now=T0)
    if normalize(prefix + content.upper() + suffix) == normalize(content) and again.outcome != "rejected":
        assert again.outcome == "deduplicated"
        assert again.memory_id == first.memory_id


@PROPERTY_SETTINGS
@given(contents, st.booleans(), st.integers(1, 300))
def test_a_rejected_write_emits_nothing_and_says_why(content: str, forbid: bool, limit: int) -> None:
    decision = decide(cmd(content), policy=WritePolicy(forbid_secrets=forbid, max_content_bytes=limit))
    assert (decision.outcome == "rejected") == bool(decision.rejected)
    if decision.outcome == "rejected":
        assert decision.events == ()
    else:
        assert len(content.encode()) <= limit
        assert not is_low_information(content)
        assert decision.classification is not None
        assert not (forbid and decision.classification.secrets)


# -- verification ---------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(st.lists(st.tuples(st.sampled_from(["b", "c", "d", "e"]), st.booleans()), min_size=1, max_size=12))
def test_verified_means_more_independent_supports_than_refutations(words: list[tuple[str, bool]]) -> None:
    state = memory(actor="a")
    latest: dict[str, bool] = {}
    for actor, supports in words:
        event = decide_verify(
            VerifyMemory(memory_id=state.id, supports=supports), ident("agent", actor), state, T0
        )
        state = evolve_memory(state, event)
        latest[actor] = supports
        supporting = sum(latest.values())
        expected = "verified" if supporting > len(latest) - supporting else "canonical"
        assert state.trust_tier == expected
    assert "a" not in {v.actor for v in state.verifications}


# -- text and classification ----------------------------------------------------------------

pii_like = st.lists(
    st.sampled_from([*"0123456789 -.+()/:TAKIBGDEZ@xyz_=", "password", "AKIA", "gh", "\n", "é", "ß"]),
    max_size=80,
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(st.one_of(st.text(), pii_like))
def test_classify_never_raises_and_is_consistent(text: str) -> None:
    result = classify(text)
    assert result.pii == tuple(sorted(set(result.pii)))
    assert len(set(result.secrets)) == len(result.secrets)
    if result.secrets:
        assert result.sensitivity == "secret"
    elif result.pii:
        assert result.sensitivity == "confidential"
    else:
        assert result.sensitivity == "internal"
    assert classify(text) == result


@settings(max_examples=2000, deadline=None)
@given(st.text())
def test_normalize_is_idempotent(text: str) -> None:
    once = normalize(text)
    assert normalize(once) == once


@settings(max_examples=1000, deadline=None)
@given(st.text())
def test_normalize_output_shape(text: str) -> None:
    once = normalize(text)
    assert once == once.strip()
    assert "  " not in once
    assert not any(c.isspace() and c != " " for c in once)
    assert is_low_information(text) == is_low_information(once)


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_normalize_ignores_ascii_case_and_surrounding_space(text: str) -> None:
    assert normalize(f"  {text.upper()}\t") == normalize(text.lower()) == normalize(text)


# -- namespaces -----------------------------------------------------------------------------

segment = st.text(alphabet=st.sampled_from(list("abe_%\\-.")), min_size=1, max_size=4).filter(
    lambda s: s not in {".", ".."}  # path operators are never segments
)
namespaces = st.lists(segment, min_size=1, max_size=5).map("/".join)


@PROPERTY_SETTINGS
@given(namespaces)
def test_ancestors_are_valid_and_contain_the_namespace(namespace: str) -> None:
    assert validate_namespace(namespace) == namespace
    chain = ancestors(namespace)
    assert chain[0] == namespace
    assert len(chain) == namespace.count("/") + 1
    for ancestor in chain:
        assert is_within(namespace, ancestor)
        assert namespace.startswith(ancestor)


@PROPERTY_SETTINGS
@given(namespaces, namespaces)
def test_is_within_means_ancestor(namespace: str, root: str) -> None:
    assert is_within(namespace, root) == (root in ancestors(namespace))


@PROPERTY_SETTINGS
@given(namespaces, namespaces)
def test_subtree_like_pattern_matches_exactly_the_strict_descendants(root: str, candidate: str) -> None:
    expected = is_within(candidate, root) and candidate != root
    assert like(subtree_like_pattern(root), candidate) is expected
    assert like(subtree_like_pattern(root), f"{root}/{candidate}")


def test_namespace_constant_is_valid() -> None:
    assert validate_namespace(NS) == NS
