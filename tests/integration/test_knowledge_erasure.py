"""Erasing L3 knowledge documents with ``forget``, on real PostgreSQL: a subtree erasure
(or ids naming a document) shreds the documents in the same append as the memories, the
certificate lists them, and no table nor a pg_dump holds their text afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import Forbidden, NotFound
from memwarden.domain.model.events import AuditRecorded, ErasureCertified, KnowledgeErased, MemoryErased
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from tests.integration.test_erasure import assert_marker_gone, rebuild_projections, tables_holding
from tests.integration.test_knowledge import (
    EXPENSES,
    EXPENSES_QUESTION,
    data_key_owners,
    knowledge_rows,
    marked,
)

OWNER = Identity("acme", "olga", "owner")
ADMIN = Identity("acme/eng", "alice", "admin")
NAMESPACES = [
    "acme",
    "acme/eng",
    "acme/eng/platform",
    "acme/engineering",
    "acme/en_",
    "acme/e%g",
    "acme/e\\g",
    "acme/e\\g/x",
    "acme/enx",
]


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as opened:
        yield opened


@pytest.fixture
def knowledge(runtime: Runtime) -> KnowledgeService:
    core = runtime.core
    return KnowledgeService(core.ledger, core.embedder, core.governance.write_policy)


def publish(service: KnowledgeService, text: str, filename: str, namespace: str) -> uuid.UUID:
    result = service.publish(OWNER, text, filename, namespace)
    assert result.outcome == "published", result.detail
    assert result.document_id is not None
    return result.document_id


def l3_answer(rt: Runtime, namespace: str = "acme/eng/alpha") -> list[str]:
    """The knowledge blocks a fault answers the expense question with, projections caught up."""
    rt.reads.runner.catch_up()
    answer = rt.working_sets.fault(Identity(namespace, "bot", "agent"), EXPENSES_QUESTION)
    rt.reads.runner.catch_up()
    if not answer.hit or answer.source != "L3":
        return []
    return [b.content for b in answer.blocks if b.kind == "knowledge"]


def erased_documents(rt: Runtime, ids: dict[str, uuid.UUID]) -> set[str]:
    heads = rt.ledger.stream_heads(list(ids.values()))
    return {ns for ns, i in ids.items() if isinstance(heads[i].event, KnowledgeErased)}


@pytest.mark.parametrize(
    ("caller", "subtree", "expected"),
    [
        ("acme/eng", ".", {"acme/eng", "acme/eng/platform"}),
        ("acme/eng", "platform", {"acme/eng/platform"}),
        ("acme/en_", ".", {"acme/en_"}),
        ("acme/e%g", "", {"acme/e%g"}),
        ("acme/e\\g", ".", {"acme/e\\g", "acme/e\\g/x"}),
    ],
)
def test_subtree_forget_erases_the_documents_in_the_subtree_only(
    runtime: Runtime, knowledge: KnowledgeService, caller: str, subtree: str, expected: set[str]
) -> None:
    ids = {ns: publish(knowledge, EXPENSES, "expenses.md", ns) for ns in NAMESPACES}
    runtime.reads.runner.catch_up()
    result = runtime.core.erasure.forget(
        Identity(caller, "boss", "admin"), Forget(subtree=subtree, reason="x")
    )
    assert erased_documents(runtime, ids) == expected
    assert set(result.certificate.erased_documents) == {ids[ns] for ns in expected}
    assert result.erased == result.certificate.count == len(expected)
    assert set(data_key_owners(runtime.core.params.conninfo())) == {
        i for ns, i in ids.items() if ns not in expected
    }
    runtime.reads.runner.catch_up()
    assert knowledge_rows(runtime)[0] == len(NAMESPACES) - len(expected)


def test_subtree_forget_leaves_no_text_of_an_erased_document_anywhere(
    runtime: Runtime, knowledge: KnowledgeService
) -> None:
    marker, sibling_marker = f"zq{uuid.uuid4().hex[:12]}", f"zs{uuid.uuid4().hex[:12]}"
    vault = publish(knowledge, marked(marker), "vault.md", "acme/eng/runbooks")
    vault_v2 = knowledge.publish(
        OWNER, marked(marker).replace("weekly", "daily"), "vault.md", "acme/eng/runbooks"
    )
    assert vault_v2.version == 2
    expenses = publish(knowledge, EXPENSES, "expenses.md", "acme/eng")
    sibling = publish(knowledge, marked(sibling_marker), "vault.md", "acme/engineering")
    memory = runtime.memory.write(ADMIN, WriteMemory(content=f"{marker} keeps the spare vault key"))
    assert memory.id is not None
    runtime.reads.runner.catch_up()
    assert f"{runtime.ledger.schema}.knowledge_chunks" in tables_holding(runtime, marker)  # the scan is real
    assert any("180 euros" in block for block in l3_answer(runtime))
    head = runtime.ledger.head_position()

    result = runtime.core.erasure.forget(ADMIN, Forget(subtree=".", reason="team dissolved"))

    certificate = result.certificate
    assert certificate.erased_ids == (memory.id,)
    assert certificate.erased_documents == tuple(sorted((vault, expenses), key=str))
    assert result.erased == certificate.count == 3
    appended = runtime.ledger.read(head, 100)
    assert [type(r.event) for r in appended] == [
        MemoryErased,
        *[KnowledgeErased] * 2,
        ErasureCertified,
        AuditRecorded,
    ]
    # each document's erasure takes the stream version after its last publication
    assert {(r.originator_id, r.originator_version) for r in appended[1:3]} == {(vault, 3), (expenses, 2)}
    assert data_key_owners(runtime.core.params.conninfo()) == [sibling]
    assert runtime.ledger.verify().ok
    assert runtime.ledger.verify_certificate(certificate).valid

    runtime.reads.runner.catch_up()
    assert knowledge_rows(runtime) == (1, 2, 2)  # the sibling's, untouched
    assert l3_answer(runtime) == []
    assert_marker_gone(runtime, marker)
    assert tables_holding(runtime, sibling_marker)

    # every version decodes to a tombstone; a replay of the projections yields the same
    assert all(v.shredded and not v.body for v in knowledge.versions(vault))
    rebuild_projections(runtime)
    assert knowledge_rows(runtime) == (1, 2, 2)
    assert l3_answer(runtime) == []
    report = Rebuilder(runtime.reads.runner).rebuild("search_index", verify=True)
    assert report.switched
    assert report.differences == []
    assert_marker_gone(runtime, marker)
    assert runtime.ledger.verify().ok
    assert runtime.ledger.verify_certificate(certificate).valid


def test_an_erased_document_is_not_published_again(runtime: Runtime, knowledge: KnowledgeService) -> None:
    document = publish(knowledge, EXPENSES, "expenses.md", "acme/eng")
    runtime.reads.runner.catch_up()
    runtime.core.erasure.forget(ADMIN, Forget(ids=(document,), reason="x"))
    state = knowledge.current(document)
    assert state is not None
    assert (state.erased, state.version, state.title) == (True, 1, "")

    again = knowledge.publish(OWNER, EXPENSES, "expenses.md", "acme/eng")
    assert (again.outcome, again.code) == ("rejected", "version_conflict")
    assert "erased" in again.detail
    assert data_key_owners(runtime.core.params.conninfo()) == []
    assert [r.originator_version for r in runtime.ledger.streams([document])[document]] == [1, 2]
    # another slug is a new document, with a key of its own
    renamed = EXPENSES.replace("title: Expense policy", "title: Expense policy\nslug: expenses-2026")
    fresh = publish(knowledge, renamed, "expenses.md", "acme/eng")
    assert fresh != document
    assert data_key_owners(runtime.core.params.conninfo()) == [fresh]
    assert any("180 euros" in block for block in l3_answer(runtime))
    # erasing it again erases nothing more
    assert runtime.core.erasure.forget(ADMIN, Forget(ids=(document,), reason="x")).erased == 0


def test_a_members_own_writes_forget_erases_no_document(
    runtime: Runtime, knowledge: KnowledgeService
) -> None:
    document = publish(knowledge, EXPENSES, "expenses.md", "acme/eng")
    runtime.core.governance.set_policy(OWNER, "acme/eng", PolicyBody(members_forget_own=True), None)
    runtime.core.governance._policies.clear()
    member = Identity("acme/eng", "mia", "member")
    own = runtime.memory.write(member, WriteMemory(content="Mia's shift starts at six on Mondays"))
    assert own.id is not None
    runtime.reads.runner.catch_up()

    result = runtime.core.erasure.forget(member, Forget(subtree=".", reason="mine"))
    assert (result.certificate.erased_ids, result.certificate.erased_documents) == ((own.id,), ())
    head = runtime.ledger.head_position()
    with pytest.raises(Forbidden, match="admin or owner"):
        runtime.core.erasure.forget(member, Forget(ids=(document,), reason="x"))
    (denied,) = [r.event for r in runtime.ledger.read(head, 10)]
    assert isinstance(denied, AuditRecorded)
    assert denied.outcome == "denied"
    assert data_key_owners(runtime.core.params.conninfo()) == [document]
    assert any("180 euros" in block for block in l3_answer(runtime))


def test_ids_naming_a_stream_that_is_neither_memory_nor_document_is_not_found(
    runtime: Runtime, knowledge: KnowledgeService
) -> None:
    result = knowledge.publish(OWNER, EXPENSES, "expenses.md", "acme/eng")
    audit = next(r for r in runtime.ledger.read(0, 100) if isinstance(r.event, AuditRecorded))
    with pytest.raises(NotFound):
        runtime.core.erasure.forget(ADMIN, Forget(ids=(audit.originator_id,), reason="x"))
    assert data_key_owners(runtime.core.params.conninfo()) == [result.document_id]


FAIL_ON_DOCUMENT_KEY = """
CREATE FUNCTION {s}.fail_on_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.memory_id = '{document}'::uuid THEN
        RAISE EXCEPTION 'injected failure';
    END IF;
    RETURN OLD;
END $$;
CREATE TRIGGER fail_on_key BEFORE DELETE ON {s}.data_keys FOR EACH ROW EXECUTE FUNCTION {s}.fail_on_key();
"""


def test_the_erasure_is_one_append_a_failing_part_writes_nothing(
    runtime: Runtime, knowledge: KnowledgeService
) -> None:
    """Destroying the document's key fails (the last step of the append): no erasure
    event, no certificate, no key destroyed, the memory's included; a retry succeeds."""
    document = publish(knowledge, EXPENSES, "expenses.md", "acme/eng")
    memory = runtime.memory.write(ADMIN, WriteMemory(content="The quarterly review is on Friday"))
    assert memory.id is not None
    runtime.reads.runner.catch_up()
    schema = runtime.ledger.schema
    conninfo = runtime.core.params.conninfo()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(FAIL_ON_DOCUMENT_KEY.format(s=f'"{schema}"', document=document).encode())
    head = runtime.ledger.head_position()

    with pytest.raises(Exception, match="injected failure"):
        runtime.core.erasure.forget(ADMIN, Forget(subtree=".", reason="x"))

    (failed,) = [r.event for r in runtime.ledger.read(head, 10)]
    assert isinstance(failed, AuditRecorded)
    assert failed.outcome == "error"
    assert set(data_key_owners(conninfo)) == {document, memory.id}
    assert runtime.memory.memory(memory.id) is not None
    assert knowledge.current(document) is not None
    assert not knowledge.current(document).erased  # type: ignore[union-attr]
    assert any("180 euros" in block for block in l3_answer(runtime))
    assert runtime.ledger.verify().ok

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(SQL("DROP TRIGGER fail_on_key ON {}.data_keys").format(Identifier(schema)))
    result = runtime.core.erasure.forget(ADMIN, Forget(subtree=".", reason="x"))
    assert (result.certificate.erased_ids, result.certificate.erased_documents) == ((memory.id,), (document,))
    assert data_key_owners(conninfo) == []
    assert l3_answer(runtime) == []
