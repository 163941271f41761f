"""The forget decider: the chains it erases whole, the knowledge-document part and the
certificate it signs; and what an erased quarantined memory keeps hidden. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

import msgspec
import pytest

from memwarden.domain.model.certificates import DeletionCertificate, certificate_message, certificate_problem
from memwarden.domain.model.commands import VerifyMemory, WritePolicy
from memwarden.domain.model.erasure import Forget, ForgetDecision, ForgetState, Head, chain_of, decide_forget
from memwarden.domain.model.errors import Forbidden, InvalidState, NotFound, OutsideSubtree
from memwarden.domain.model.events import KnowledgeErased, KnowledgePublished, MemoryErased, MemoryRetired
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.knowledge import (
    KnowledgeState,
    decide_publish,
    evolve_knowledge,
    fold_knowledge,
    knowledge_stream,
    next_version,
    parse_document,
)
from memwarden.domain.model.memory import MemoryState, evolve_memory
from memwarden.domain.model.verification import decide_verify
from tests.unit.builders import T0, at, memory, uid

ADMIN = Identity("acme/eng", "alice", "admin")
MEMBER = Identity("acme/eng", "mia", "member")
CERTIFICATE_ID = UUID(int=7)
HEAD = Head(41, "ab" * 32)
NAMESPACES = (
    "acme",
    "acme/eng",
    "acme/eng/platform",
    "acme/engineering",
    "acme/en_",
    "acme/e%g",
    "acme/sales",
)


def document(
    namespace: str, slug: str = "runbook", version: int = 1, *, erased: bool = False
) -> KnowledgeState:
    return KnowledgeState(
        document_id=knowledge_stream(namespace, slug),
        namespace=namespace,
        slug=slug,
        version=version,
        title="" if erased else "Runbook",
        content_hash="" if erased else "c0ffee",
        chunks=0 if erased else 2,
        shredded=erased,
        erased=erased,
    )


def documents(*states: KnowledgeState) -> dict[UUID, KnowledgeState]:
    return {d.document_id: d for d in states}


def forget(
    caller: Identity,
    command: Forget,
    docs: Sequence[KnowledgeState] = (),
    memories: Sequence[MemoryState] = (),
    members_forget_own: bool = True,
) -> ForgetDecision:
    state = ForgetState(
        targets=tuple(m.id for m in memories),
        memories={m.id: m for m in memories},
        documents=documents(*docs),
    )
    return decide_forget(command, caller, state, members_forget_own, T0, CERTIFICATE_ID, HEAD, "key-1")


def namespaces_of(decision: ForgetDecision) -> set[str]:
    return {d.namespace for d in decision.erased_documents}


# -- subtree -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caller", "subtree", "expected"),
    [
        ("acme/eng", ".", {"acme/eng", "acme/eng/platform"}),
        ("acme/eng", "platform", {"acme/eng/platform"}),
        ("acme/en_", ".", {"acme/en_"}),
        ("acme/e%g", ".", {"acme/e%g"}),
        ("acme", "/acme/eng", {"acme/eng", "acme/eng/platform"}),
    ],
)
def test_a_subtree_erasure_erases_the_documents_inside_it_only(
    caller: str, subtree: str, expected: set[str]
) -> None:
    """The lookup is a hint: even a document it wrongly returned (a sibling, an ancestor)
    is erased only when the ledger state puts it inside the subtree."""
    every = [document(ns) for ns in NAMESPACES]
    decision = forget(Identity(caller, "boss", "owner"), Forget(subtree=subtree, reason="x"), every)
    assert namespaces_of(decision) == expected


def test_erased_documents_are_listed_counted_and_get_a_content_free_event() -> None:
    docs = [document("acme/eng", slug) for slug in ("b-doc", "a-doc", "c-doc")]
    old = memory(namespace="acme/eng/platform", actor="bob")
    decision = forget(ADMIN, Forget(subtree=".", reason="offboarding"), docs, [old])
    certificate = decision.certificate
    assert certificate.erased_ids == (old.id,)
    assert certificate.erased_documents == tuple(sorted((d.document_id for d in docs), key=str))
    assert certificate.count == 4
    assert certificate_problem(certificate) is None
    assert [e.document_id for e in decision.document_events] == list(certificate.erased_documents)
    for event in decision.document_events:
        assert isinstance(event, KnowledgeErased)
        assert (event.namespace, event.certificate_id, event.by, event.at) == (
            "acme/eng",
            CERTIFICATE_ID,
            "alice",
            T0,
        )
        assert event.stream_id == event.document_id
        assert not KnowledgeErased.SEALED
        assert "Runbook" not in msgspec.json.encode(event).decode()


def test_a_document_already_erased_is_not_erased_again() -> None:
    live, gone = document("acme/eng", "live"), document("acme/eng", "gone", 3, erased=True)
    decision = forget(ADMIN, Forget(subtree=".", reason="x"), [live, gone])
    assert [d.document_id for d in decision.erased_documents] == [live.document_id]
    by_id = forget(ADMIN, Forget(ids=(gone.document_id,), reason="x"), [gone])
    assert by_id.erased_documents == ()
    assert by_id.certificate.count == 0


def test_a_member_forgetting_its_own_writes_never_erases_a_document() -> None:
    own = memory(namespace="acme/eng", actor="mia")
    decision = forget(MEMBER, Forget(subtree=".", reason="mine"), [document("acme/eng")], [own])
    assert decision.erased_documents == ()
    assert decision.document_events == ()
    assert decision.certificate.erased_ids == (own.id,)
    assert decision.certificate.erased_documents == ()


def test_a_subject_erasure_leaves_documents_alone() -> None:
    decision = forget(ADMIN, Forget(subject="dana", reason="x"), [document("acme/eng")])
    assert decision.erased_documents == ()
    assert decision.certificate.count == 0


# -- ids -----------------------------------------------------------------------------------------


def test_an_ids_erasure_naming_a_document_erases_it_with_the_memories() -> None:
    doc = document("acme/eng/platform")
    mem = memory(namespace="acme/eng")
    decision = forget(ADMIN, Forget(ids=(doc.document_id, mem.id, doc.document_id), reason="x"), [doc], [mem])
    assert decision.erased_documents == (doc,)
    assert [m.id for m in decision.erased] == [mem.id]
    assert decision.certificate.count == 2


def test_an_ids_erasure_of_a_document_is_scoped_like_a_memory() -> None:
    above, beside = document("acme"), document("acme/engineering")
    with pytest.raises(OutsideSubtree):
        forget(ADMIN, Forget(ids=(above.document_id,), reason="x"), [above])
    with pytest.raises(NotFound):
        forget(ADMIN, Forget(ids=(beside.document_id,), reason="x"), [beside])
    with pytest.raises(NotFound):  # an id that is neither a memory nor a document
        forget(ADMIN, Forget(ids=(uid(),), reason="x"), [document("acme/eng")])


def test_a_member_may_not_erase_a_document_by_id() -> None:
    own = memory(namespace="acme/eng", actor="mia")
    doc = document("acme/eng")
    with pytest.raises(Forbidden, match="admin or owner"):
        forget(MEMBER, Forget(ids=(own.id, doc.document_id), reason="x"), [doc], [own])


# -- whole chains: every version a history lists ------------------------------------------------


def reviewed_chain() -> tuple[MemoryState, MemoryState, MemoryState]:
    """``old`` corrected by ``kept``; a dispute over ``kept`` settled ``keep_old`` rejected ``rejected``.
    Only ``rejected`` names the link (``kept``): the kept memory's stream never hears of it."""
    old, kept, rejected = uid(), uid(), uid()
    return (
        memory(old, status="retired", retired_at=at(-5), superseded_by=(kept,)),
        memory(kept, supersedes=(old,)),
        memory(rejected, status="retired", retired_at=at(-1), kept=kept, trust_tier="candidate"),
    )


@pytest.mark.parametrize("target", [0, 1, 2])
def test_forgetting_any_version_erases_the_rejected_in_review_one_too(target: int) -> None:
    """``history`` shows the rejection as a step (kind ``rejected``), so erasure follows it
    both ways: from the kept memory (and what it superseded) to the rejected one, and back."""
    chain = reviewed_chain()
    decision = forget(ADMIN, Forget(ids=(chain[target].id,), reason="x"), memories=chain)
    expected = tuple(sorted((m.id for m in chain), key=str))
    assert decision.certificate.erased_ids == expected
    assert decision.certificate.count == 3
    assert sorted((e.memory_id for e in decision.events), key=str) == list(expected)


def test_the_rejection_is_found_only_among_the_loaded_memories() -> None:
    """The walk reports a ``kept`` it cannot see as still to load; the reverse link comes
    from the loaded states alone (the service loads what the lookup names)."""
    old, kept, rejected = reviewed_chain()
    assert chain_of([kept.id], {m.id: m for m in (old, kept)}) == ({old.id, kept.id}, set())
    assert chain_of([rejected.id], {rejected.id: rejected}) == ({rejected.id}, {kept.id})
    with pytest.raises(InvalidState, match="loaded whole"):
        forget(ADMIN, Forget(ids=(rejected.id,), reason="x"), memories=[rejected])


def test_a_keep_old_review_is_folded_into_the_rejected_memory() -> None:
    kept, rejected = memory(), memory(status="disputed")
    retired = MemoryRetired(memory_id=rejected.id, reason="no", dispute_id=uid(), kept=kept.id, at=at(0))
    folded = evolve_memory(rejected, retired)
    assert (folded.status, folded.kept, folded.superseded_by) == ("retired", kept.id, ())
    assert evolve_memory(folded, erasure_of(folded)).kept == kept.id  # ids outlive the content


# -- a memory erased while quarantined stays hidden ------------------------------------------------


def erasure_of(state: MemoryState) -> MemoryErased:
    return MemoryErased(memory_id=state.id, namespace=state.namespace, certificate_id=uid(), by="a", at=at(1))


@pytest.mark.parametrize(("status", "hidden"), [("disputed", True), ("active", False), ("retired", False)])
def test_a_tombstone_is_hidden_exactly_when_the_memory_was_quarantined(status: str, hidden: bool) -> None:
    state = memory(status=status)
    tombstone = evolve_memory(state, erasure_of(state))
    assert (tombstone.status, tombstone.content, tombstone.hidden) == ("erased", None, hidden)
    assert evolve_memory(tombstone, erasure_of(tombstone)).hidden == hidden  # erased again: unchanged


def test_the_tombstone_of_a_quarantined_memory_looks_missing_to_verify_and_erasure() -> None:
    """Before erasure an agent of a child namespace got 404 for it; after, still 404 (not
    ``outside_subtree`` or ``invalid_state``, which would tell it the memory exists)."""
    quarantined = memory(namespace="acme", status="disputed", actor="agent-q")
    tombstone = evolve_memory(quarantined, erasure_of(quarantined))
    agent = Identity("acme/eng", "agent-v", "agent")
    for state in (quarantined, tombstone):
        with pytest.raises(NotFound):
            decide_verify(VerifyMemory(memory_id=state.id, supports=True), agent, state, at(2))
        with pytest.raises(NotFound):
            forget(ADMIN, Forget(ids=(state.id,), reason="x"), memories=[state])
    shown = memory(namespace="acme")
    with pytest.raises(OutsideSubtree):
        forget(ADMIN, Forget(ids=(shown.id,), reason="x"), memories=[evolve_memory(shown, erasure_of(shown))])


# -- the certificate ------------------------------------------------------------------------------


def certificate(**fields: object) -> DeletionCertificate:
    base: dict[str, object] = {
        "id": UUID(int=1),
        "erased_ids": (UUID(int=2),),
        "count": 1,
        "scope": "acme/eng",
        "target_kind": "ids",
        "ledger_position": 5,
        "ledger_hash": "00",
        "time": datetime(2026, 1, 1, tzinfo=UTC),
        "requester": "alice",
        "requester_namespace": "acme/eng",
        "requester_role": "admin",
        "reason": "r",
        "key_id": "k",
    }
    return DeletionCertificate(**{**base, **fields})  # type: ignore[arg-type]


def test_a_certificate_without_documents_signs_the_same_bytes_as_before_the_field() -> None:
    """Certificates signed before ``erased_documents`` existed must keep verifying."""
    assert certificate_message(certificate()) == (
        b'{"count":1,"erased_ids":["00000000-0000-0000-0000-000000000002"],'
        b'"id":"00000000-0000-0000-0000-000000000001","key_id":"k",'
        b'"kind":"memwarden-deletion-certificate-v1","ledger_hash":"00","ledger_position":5,'
        b'"reason":"r","requester":"alice","requester_namespace":"acme/eng","requester_role":"admin",'
        b'"scope":"acme/eng","target":null,"target_kind":"ids","time":"2026-01-01T00:00:00+00:00"}'
    )
    old_form = msgspec.json.decode(
        msgspec.json.encode(
            {k: v for k, v in msgspec.structs.asdict(certificate()).items() if k != "erased_documents"}
        )
    )
    assert msgspec.convert(old_form, DeletionCertificate) == certificate()


def test_the_documents_are_signed_and_counted() -> None:
    listed = certificate(erased_documents=(UUID(int=3),), count=2)
    assert certificate_problem(listed) is None
    assert b'"erased_documents":["00000000-0000-0000-0000-000000000003"]' in certificate_message(listed)
    assert certificate_message(listed) != certificate_message(certificate(count=2))
    assert certificate_problem(certificate(erased_documents=(UUID(int=3),))) is not None  # count
    assert certificate_problem(certificate(erased_documents=(UUID(int=2),), count=2)) is not None  # twice
    unsorted = certificate(erased_documents=(UUID(int=9), UUID(int=3)), count=3)
    assert certificate_problem(unsorted) is not None


# -- the document stream after an erasure ------------------------------------------------------------

RUNBOOK = "# Runbook\n\nRestart the queue workers one at a time.\n"


def published() -> KnowledgePublished:
    draft = parse_document(RUNBOOK, "runbook.md")
    event = decide_publish(Identity("acme", "olga", "owner"), draft, "acme/eng", None, WritePolicy(), at(0))
    assert event is not None
    return event


def erasure(event: KnowledgePublished) -> KnowledgeErased:
    return KnowledgeErased(
        document_id=event.document_id,
        namespace=event.namespace,
        certificate_id=CERTIFICATE_ID,
        by="a",
        at=at(1),
    )


def test_an_erased_stream_folds_to_a_content_free_state_and_refuses_a_new_version() -> None:
    v1 = published()
    state = fold_knowledge([v1, erasure(v1)])
    assert state is not None
    assert (state.version, state.erased, state.shredded, state.title, state.chunks) == (1, True, True, "", 0)
    draft = parse_document(RUNBOOK, "runbook.md")
    with pytest.raises(InvalidState, match="erased"):
        next_version(Identity("acme", "olga", "owner"), draft, "acme/eng", state, WritePolicy())
    with pytest.raises(InvalidState):  # nothing follows an erasure
        evolve_knowledge(state, msgspec.structs.replace(v1, version=2))
    with pytest.raises(InvalidState):
        evolve_knowledge(state, erasure(v1))
    with pytest.raises(InvalidState):  # an erasure needs a publication before it
        evolve_knowledge(None, erasure(v1))
