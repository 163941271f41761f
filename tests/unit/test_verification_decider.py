"""Independent verification (docs/architecture.md section 4): another actor countersigns or refutes."""

from __future__ import annotations

import pytest

from memwarden.domain.model.commands import VerifyMemory
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import MemoryVerified, Provenance
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState, Verification, evolve_memory
from memwarden.domain.model.verification import MAX_NOTE_LENGTH, decide_verify
from tests.unit.builders import (
    ADMIN,
    AGENT,
    AUDITOR,
    MEMBER,
    NS,
    OTHER_AGENT,
    OWNER,
    T0,
    Store,
    at,
    cmd,
    ident,
    memory,
)

WRITER = AGENT  # agent-a writes; others verify


def verify(
    m: MemoryState | None,
    identity: Identity,
    supports: bool = True,
    note: str | None = None,
    now: object = T0,
) -> MemoryVerified:
    command = VerifyMemory(memory_id=m.id if m else memory().id, supports=supports, note=note)
    return decide_verify(command, identity, m, now)  # type: ignore[arg-type]


def verified(m: MemoryState, identity: Identity, supports: bool = True, now: object = T0) -> MemoryState:
    return evolve_memory(m, verify(m, identity, supports, now=now))


def written() -> MemoryState:
    return memory(actor=WRITER.actor, content="The deploy window is Tuesday")


def test_an_actor_cannot_verify_its_own_write() -> None:
    with pytest.raises(Forbidden, match="own write"):
        verify(written(), WRITER)


def test_the_same_actor_under_another_role_is_still_the_writer() -> None:
    with pytest.raises(Forbidden):
        verify(written(), ident("admin", WRITER.actor))


def test_a_co_writer_joined_by_dedupe_cannot_verify() -> None:
    store = Store()
    first = store.write(cmd("The deploy window is Tuesday"), identity=WRITER, now=at(-2))
    again = store.write(cmd("the deploy window is tuesday."), identity=OTHER_AGENT, now=at(-1))
    assert again.outcome == "deduplicated"
    assert first.memory_id is not None
    m = store.memories[first.memory_id]
    assert m.writers == {WRITER.actor, OTHER_AGENT.actor}

    with pytest.raises(Forbidden):
        verify(m, OTHER_AGENT)
    assert verify(m, MEMBER).trust_tier == "verified"


def test_an_independent_support_makes_the_memory_verified() -> None:
    m = written()
    event = verify(m, OTHER_AGENT, note="checked the calendar")

    assert event == MemoryVerified(
        memory_id=m.id,
        actor=OTHER_AGENT.actor,
        supports=True,
        note="checked the calendar",
        trust_tier="verified",
        at=T0,
    )
    after = evolve_memory(m, event)
    assert after.trust_tier == "verified"
    assert after.verifications == (Verification(actor=OTHER_AGENT.actor, supports=True, at=T0),)
    assert after.version == m.version + 1
    assert after.status == "active"


@pytest.mark.parametrize("verifier", [OTHER_AGENT, MEMBER, ADMIN, OWNER], ids=lambda i: i.role)
def test_every_writer_role_may_verify(verifier: Identity) -> None:
    assert verify(written(), verifier).trust_tier == "verified"


def test_a_refutation_alone_keeps_the_memory_canonical() -> None:
    event = verify(written(), OTHER_AGENT, supports=False)
    assert event.supports is False
    assert event.trust_tier == "canonical"


def test_a_refutation_by_another_actor_brings_it_back_to_canonical() -> None:
    m = verified(written(), OTHER_AGENT, now=at(1))
    assert m.trust_tier == "verified"
    m = verified(m, MEMBER, supports=False, now=at(2))
    assert m.trust_tier == "canonical"
    assert [v.supports for v in m.verifications] == [True, False]
    m = verified(m, ADMIN, supports=True, now=at(3))
    assert m.trust_tier == "verified"  # two supports against one refutation


def test_the_latest_word_of_each_actor_counts() -> None:
    m = verified(written(), OTHER_AGENT, supports=True)
    m = verified(m, OTHER_AGENT, supports=False)
    assert m.trust_tier == "canonical"
    m = verified(m, OTHER_AGENT, supports=True)
    assert m.trust_tier == "verified"
    assert len(m.verifications) == 3


def test_a_verifier_who_later_co_writes_the_memory_no_longer_verifies_it() -> None:
    """docs/architecture.md: a memory becomes verified only through an independent actor.

    Once the only supporter's own write joins the memory (dedupe), that support is no
    longer independent, so the memory must not remain ``verified`` on its strength.
    """
    store = Store()
    first = store.write(cmd("The deploy window is Tuesday"), identity=WRITER, now=at(-2))
    assert first.memory_id is not None
    store.apply([verify(store.memories[first.memory_id], OTHER_AGENT, now=at(-1))])
    assert store.memories[first.memory_id].trust_tier == "verified"

    again = store.write(cmd("The deploy window is Tuesday"), identity=OTHER_AGENT, now=T0)
    assert again.outcome == "deduplicated"
    m = store.memories[first.memory_id]
    assert OTHER_AGENT.actor in m.writers
    assert m.trust_tier != "verified", "verified only by one of its own writers"


# -- not found, forbidden, invalid --------------------------------------------------------


def test_a_missing_memory_is_not_found() -> None:
    with pytest.raises(NotFound):
        verify(None, OTHER_AGENT)


@pytest.mark.parametrize("identity", [OTHER_AGENT, ADMIN, AUDITOR], ids=lambda i: i.role)
def test_a_disputed_memory_is_not_found(identity: Identity) -> None:
    m = memory(actor=WRITER.actor, status="disputed")
    with pytest.raises(NotFound):
        verify(m, identity)


@pytest.mark.parametrize(
    ("memory_ns", "caller_ns"),
    [
        ("acme/sales", "acme/eng"),
        ("acme/eng/platform", "acme/eng"),  # a descendant is not an ancestor
        ("acme/engineering", "acme/eng"),
        ("acme/eng", "acme/engineering"),
        ("globex", "acme"),
    ],
)
def test_a_memory_outside_the_callers_ancestors_is_not_found(memory_ns: str, caller_ns: str) -> None:
    m = memory(actor=WRITER.actor, namespace=memory_ns)
    with pytest.raises(NotFound):
        verify(m, ident("admin", "admin-y", namespace=caller_ns))


@pytest.mark.parametrize("memory_ns", ["acme", "acme/eng", "acme/eng/platform"])
def test_a_memory_in_an_ancestor_namespace_may_be_verified(memory_ns: str) -> None:
    m = memory(actor=WRITER.actor, namespace=memory_ns)
    caller = ident("agent", "agent-deep", namespace="acme/eng/platform")
    assert verify(m, caller).trust_tier == "verified"


def test_an_auditor_may_not_verify() -> None:
    with pytest.raises(Forbidden):
        verify(written(), AUDITOR)


def test_outside_the_namespace_is_not_found_even_for_an_auditor() -> None:
    with pytest.raises(NotFound):
        verify(memory(namespace="acme/sales"), ident("auditor", "aud", namespace=NS))


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "retired", "retired_at": at(-1)},
        {"status": "erased", "retired_at": at(-1)},
        {"retired_at": at(-1)},
    ],
    ids=["retired", "erased", "retired_at"],
)
def test_only_active_memories_can_be_verified(fields: dict[str, object]) -> None:
    m = memory(actor=WRITER.actor, **fields)  # type: ignore[arg-type]
    with pytest.raises(InvalidState):
        verify(m, OTHER_AGENT)


def test_a_note_has_a_length_limit() -> None:
    m = written()
    assert verify(m, OTHER_AGENT, note="n" * MAX_NOTE_LENGTH).note == "n" * MAX_NOTE_LENGTH
    with pytest.raises(InvalidRequest):
        verify(m, OTHER_AGENT, note="n" * (MAX_NOTE_LENGTH + 1))


def test_a_provenance_from_another_source_by_the_same_actor_still_counts_as_own() -> None:
    m = memory(
        actor=WRITER.actor,
        provenance=(Provenance("conversation", WRITER.actor), Provenance("document", "agent-c")),
    )
    with pytest.raises(Forbidden):
        verify(m, ident("member", "agent-c"))
