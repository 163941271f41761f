"""The forget decider's knowledge-document part and the certificate it signs. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from uuid import UUID

import msgspec
import pytest

from domain.model.certificates import DeletionCertificate, certificate_message, certificate_problem
from domain.model.commands import WritePolicy
from domain.model.erasure import Forget, ForgetDecision, ForgetState, Head, decide_forget
from domain.model.errors import Forbidden, InvalidState, NotFound, OutsideSubtree
from domain.model.events import KnowledgeErased, KnowledgePublished
from domain.model.identity import Identity
from domain.model.knowledge import (
    KnowledgeState,
    decide_publish,
    evolve_knowledge,
    fold_knowledge,
    knowledge_stream,
    next_version,
    parse_document,
)
from domain.model.memory import MemoryState
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
