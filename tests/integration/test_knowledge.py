"""Loading L3 knowledge documents onto the real ledger (PostgreSQL), with HashEmbedder."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

import msgspec
import numpy as np
import psycopg
import pytest
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.core import Core, open_core
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import EmbedderUnavailable, HashEmbedder, vector_from_bytes
from memwarden.domain.embedding.base import Matrix
from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.ledger.recorder import AppendGroup
from memwarden.domain.model.errors import Forbidden
from memwarden.domain.model.events import AuditRecorded, KnowledgePublished
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.knowledge import KnowledgeState, decide_publish, knowledge_stream, parse_document
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.settings import SCHEMA, Settings
from memwarden.projections.rebuild import Rebuilder
from tests.unit.builders import EXPENSE_POLICY

OWNER = Identity("acme", "olga", "owner")
NS = "acme/eng"

DEPLOYS = """---
title: Deploys
slug: deploys
tags: [ops]
---
# Deploys

Every deploy goes through the pipeline; nobody ships from a laptop.

## Rollback

Run the rollback job with the previous release tag. It takes about four minutes.
"""
ONCALL = """# On-call

Page the secondary after fifteen minutes without an acknowledgement.
"""
DATABASES = """---
namespace: runbooks
---
# Databases

Failover is automatic; the replica in the other zone takes over within a minute.

## Backups

Nightly snapshots are kept for thirty days and restored weekly as a drill.
"""


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    return write(
        tmp_path / "docs",
        {
            "deploys.md": DEPLOYS,
            "oncall.md": ONCALL,
            "infra/databases.md": DATABASES,
            "notes.txt": "not markdown",
        },
    )


@pytest.fixture
def service(core: Core) -> KnowledgeService:
    return KnowledgeService(core.ledger, HashEmbedder(), core.governance.write_policy)


def events_after(core: Core, position: int) -> list[Recorded]:
    return core.ledger.read(position, 10_000)


def knowledge_audits(core: Core, after: int = 0) -> list[AuditRecorded]:
    return [
        r.event
        for r in events_after(core, after)
        if isinstance(r.event, AuditRecorded) and r.event.op == "knowledge_publish"
    ]


def stream(core: Core, document_id: UUID) -> list[KnowledgePublished]:
    found = core.ledger.streams([document_id]).get(document_id, [])
    assert all(isinstance(r.event, KnowledgePublished) for r in found)
    return [r.event for r in found if isinstance(r.event, KnowledgePublished)]


def test_loading_a_directory_publishes_version_one_of_each_document(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    results = service.load_directory(OWNER, docs, NS)
    assert [(r.path, r.outcome, r.version, r.namespace, r.slug) for r in results] == [
        ("deploys.md", "published", 1, NS, "deploys"),
        ("infra/databases.md", "published", 1, "acme/eng/runbooks", "databases"),
        ("oncall.md", "published", 1, NS, "oncall"),
    ]
    for result in results:
        assert result.document_id == knowledge_stream(result.namespace or "", result.slug or "")
        (event,) = stream(core, result.document_id)
        assert event.version == 1
        assert event.published_by == "olga"
        assert event.source == result.path
        assert len(event.chunks) == result.chunks > 0
        assert event.embedding_model == HashEmbedder().model_id
        for chunk in event.chunks:
            assert chunk.embedding is not None
            vector = vector_from_bytes(chunk.embedding)
            assert vector.shape == (384,)
            assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-2
    assert [r.position for r in results] == sorted(r.position or 0 for r in results)
    assert results[-1].position == core.ledger.head_position()
    audits = knowledge_audits(core)
    assert [(a.outcome, a.actor, a.subject_ids) for a in audits] == [
        ("ok", "olga", (r.document_id,)) for r in results
    ]
    assert audits[0].detail == "deploys.md: deploys v1, 2 chunks"
    assert core.ledger.verify().ok


def test_reloading_unchanged_documents_appends_only_their_audit_records(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    first = service.load_directory(OWNER, docs, NS)
    head = core.ledger.head_position()
    again = service.load_directory(OWNER, docs, NS)
    assert [(r.outcome, r.version, r.document_id) for r in again] == [
        ("unchanged", 1, r.document_id) for r in first
    ]
    appended = events_after(core, head)
    assert core.ledger.head_position() == head + len(first)  # exactly one audit record per document
    assert all(isinstance(r.event, AuditRecorded) for r in appended)
    assert [r.event.detail for r in appended if isinstance(r.event, AuditRecorded)] == [
        "deploys.md: deploys v1 unchanged",
        "infra/databases.md: databases v1 unchanged",
        "oncall.md: oncall v1 unchanged",
    ]
    assert [r.position for r in again] == [r.position for r in appended]


def test_an_edit_publishes_version_two_and_version_one_stays_as_it_was(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    (deploys, *_) = service.load_directory(OWNER, docs, NS)
    assert deploys.document_id is not None
    (v1_before,) = stream(core, deploys.document_id)
    (docs / "deploys.md").write_text(DEPLOYS.replace("four minutes", "six minutes"), encoding="utf-8")
    results = {r.path: r for r in service.load_directory(OWNER, docs, NS)}
    assert results["deploys.md"].outcome == "published"
    assert results["deploys.md"].version == 2
    assert results["oncall.md"].outcome == "unchanged"
    v1, v2 = stream(core, deploys.document_id)
    assert v1 == v1_before  # immutable: the first version is exactly what it was
    assert (v1.version, v2.version) == (1, 2)
    assert "four minutes" in v1.body
    assert "six minutes" in v2.body
    assert v1.content_hash != v2.content_hash
    assert {c.chunk_id for c in v1.chunks}.isdisjoint({c.chunk_id for c in v2.chunks})
    current = service.current(deploys.document_id)
    assert isinstance(current, KnowledgeState)
    assert current.version == 2
    assert service.versions(deploys.document_id) == [v1, v2]
    assert core.ledger.verify().ok


def test_bad_files_are_rejected_and_audited_while_the_others_publish(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    write(
        docs,
        {
            "bad-yaml.md": "---\ntitle: [unclosed\nslug: x\n---\nThe deploy pipeline runs hourly.\n",
            "typo.md": "---\ntitel: Deploys\n---\nThe deploy pipeline runs hourly.\n",
            "latin1.md": "Caf\xe9 opening hours are nine to five.".encode("latin-1"),
            "huge.md": "# Huge\n\n" + "lorem ipsum dolor sit amet " * 1_000,
            "leak.md": "# Leak\n\nThe deploy key is AKIAABCDEFGHIJKLMNOP, keep it safe.\n",
            "empty.md": "---\ntitle: Nothing\n---\n\n",
            "copy/deploys.md": "# Another deploys\n\nThis would claim the same slug in the same namespace.\n",
            "outside.md": "---\nnamespace: acme/sales\n---\nSales runbook text goes here.\n",
        },
    )
    before = core.ledger.head_position()
    results = {r.path: r for r in service.load_directory(OWNER, docs, NS)}
    assert sorted(p for p, r in results.items() if r.outcome == "published") == [
        "infra/databases.md",
        "oncall.md",
    ]
    rejected = {p: r for p, r in results.items() if r.outcome == "rejected"}
    expected = {
        "bad-yaml.md": "invalid YAML front matter at line",
        "typo.md": "unknown front matter key 'titel'",
        "latin1.md": "not UTF-8",
        "huge.md": "larger than the limit of 16384 bytes",
        "leak.md": "secret_forbidden",
        "empty.md": "no body",
        "copy/deploys.md": "acme/eng/deploys is also claimed by deploys.md",
        "deploys.md": "acme/eng/deploys is also claimed by copy/deploys.md",
        "outside.md": "'acme/sales' is outside 'acme/eng'",
    }
    assert set(rejected) == set(expected)
    for path, needle in expected.items():
        assert rejected[path].detail.startswith(f"{path}: ")
        assert needle in rejected[path].detail, rejected[path].detail
        assert rejected[path].version is None
    assert rejected["outside.md"].code == "outside_subtree"
    assert rejected["leak.md"].slug == "leak"
    assert rejected["leak.md"].document_id == knowledge_stream(NS, "leak")
    assert stream(core, knowledge_stream(NS, "leak")) == []  # nothing of a refused document
    denied = [a for a in knowledge_audits(core, before) if a.outcome == "denied"]
    assert sorted(a.detail.split(": ", 2)[1] for a in denied) == sorted(expected)
    assert {a.detail.split(": ", 1)[0] for a in denied} == {"invalid_request", "outside_subtree"}
    assert "AKIA" not in " ".join(a.detail for a in denied)  # the secret is named, never repeated
    published_events = [r for r in events_after(core, before) if isinstance(r.event, KnowledgePublished)]
    assert len(published_events) == 2  # neither of two files claiming one document wins


def test_a_namespace_policy_that_allows_secrets_is_applied_to_its_documents(
    core: Core, service: KnowledgeService, tmp_path: Path
) -> None:
    core.governance.set_policy(OWNER, "acme/eng/vault", PolicyBody(forbid_secrets=False))
    leak = "# Break glass\n\nThe emergency key is AKIAABCDEFGHIJKLMNOP.\n"
    root = write(tmp_path / "d", {"vault/glass.md": "---\nnamespace: vault\n---\n" + leak, "glass.md": leak})
    results = {r.path: r for r in service.load_directory(OWNER, root, NS)}
    assert results["vault/glass.md"].outcome == "published"
    assert results["vault/glass.md"].namespace == "acme/eng/vault"
    assert results["glass.md"].outcome == "rejected"


class DownEmbedder:
    model_id = "down-1"
    dimensions = 384

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Matrix:
        self.calls += 1
        raise EmbedderUnavailable("connection refused")


def test_an_embedder_failure_publishes_lexical_only_and_says_so(core: Core, docs: Path) -> None:
    embedder = DownEmbedder()
    service = KnowledgeService(core.ledger, embedder, core.governance.write_policy)
    results = service.load_directory(OWNER, docs, NS)
    assert [r.outcome for r in results] == ["published"] * 3
    assert embedder.calls == 3  # one batch per document
    for result in results:
        assert not result.embedded
        assert "embedding unavailable (connection refused)" in result.detail
        assert result.document_id is not None
        (event,) = stream(core, result.document_id)
        assert event.embedding_model is None
        assert all(c.embedding is None for c in event.chunks)
    assert all("embedding unavailable" in a.detail for a in knowledge_audits(core))


def test_without_an_embedder_documents_are_lexical_only(core: Core, docs: Path) -> None:
    service = KnowledgeService(core.ledger, None, core.governance.write_policy)
    result = service.publish(OWNER, ONCALL, "oncall.md", NS)
    assert result.outcome == "published"
    assert not result.embedded
    assert result.detail == "oncall v1, 1 chunk; embedding unavailable (no embedder)"


def test_unchanged_documents_are_not_embedded_again(core: Core, docs: Path) -> None:
    class Counting(HashEmbedder):
        calls = 0

        def embed(self, texts: Sequence[str]) -> Matrix:
            Counting.calls += 1
            return super().embed(texts)

    service = KnowledgeService(core.ledger, Counting(), core.governance.write_policy)
    service.load_directory(OWNER, docs, NS)
    service.load_directory(OWNER, docs, NS)
    assert Counting.calls == 3


def test_agents_and_members_cannot_publish_and_the_refusal_is_audited(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    agent = Identity(NS, "bot-1", "agent")
    with pytest.raises(Forbidden):
        service.load_directory(agent, docs)
    member = Identity(NS, "mia", "member")
    result = service.publish(member, ONCALL, "oncall.md")
    assert (result.outcome, result.code) == ("rejected", "forbidden")
    audits = knowledge_audits(core)
    assert [(a.actor, a.outcome) for a in audits] == [("bot-1", "denied"), ("mia", "denied")]
    assert not [r for r in events_after(core, 0) if isinstance(r.event, KnowledgePublished)]


def test_an_admin_publishes_only_inside_its_subtree(
    core: Core, service: KnowledgeService, docs: Path
) -> None:
    admin = Identity("acme/eng/platform", "ada", "admin")
    with pytest.raises(Exception, match="outside"):
        service.load_directory(admin, docs, NS)
    assert service.publish(admin, ONCALL, "oncall.md").namespace == "acme/eng/platform"


def test_a_stale_read_re_decides_on_the_new_version(core: Core, docs: Path) -> None:
    """Another publisher took version 1 between this service's read and its append."""

    class Stale(KnowledgeService):
        reads = 0

        def current(self, document_id: UUID) -> KnowledgeState | None:
            self.reads += 1
            return None if self.reads == 1 else super().current(document_id)

    other = KnowledgeService(core.ledger, HashEmbedder(), core.governance.write_policy)
    other.publish(OWNER, ONCALL, "oncall.md", NS)
    stale = Stale(core.ledger, HashEmbedder(), core.governance.write_policy)
    result = stale.publish(OWNER, ONCALL.replace("fifteen", "ten"), "oncall.md", NS)
    assert (result.outcome, result.version) == ("published", 2)
    assert stale.reads == 2
    assert [e.version for e in stream(core, knowledge_stream(NS, "oncall"))] == [1, 2]
    assert len(knowledge_audits(core)) == 2  # the lost attempt left nothing behind


# -- sealing: no plaintext of a document on the ledger ------------------------------------------

EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
DATA_KEYS = SQL("{}.data_keys").format(Identifier(SCHEMA))
EXPENSES = EXPENSE_POLICY
EXPENSES_QUESTION = "What is the hotel limit for travel expenses?"


def marked(word: str) -> str:
    return f"""---
title: Vault procedures {word}
slug: vault
tags: [security]
---
# Vault procedures {word}

The vault door code rotates weekly; ask the duty officer {word}.

## Escalation {word}

Call the facilities desk when the door sticks {word}.
"""


def events_holding(conninfo: str, needles: Sequence[str]) -> list[str]:
    """The needles found in any raw row of the events table (every column, as text, and
    the stored state's bytes)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(SQL("SELECT t::text, t.state FROM {} t").format(EVENTS)).fetchall()
    assert rows, "nothing was written"
    return [
        needle
        for needle in needles
        if any(
            needle in text or needle.encode().hex() in text or needle.encode() in bytes(state)
            for text, state in rows
        )
    ]


def plaintexts(event: KnowledgePublished) -> list[str]:
    """Every piece of a document's content a reader must not find on the ledger."""
    lines = [line for line in event.body.splitlines() if line.strip()]
    pieces = [event.title, event.content_hash, *lines]
    pieces += [c.text for c in event.chunks] + [c.heading for c in event.chunks if c.heading]
    return pieces


def all_states(conninfo: str) -> list[tuple[int, str, bytes]]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        rows = conn.execute(SQL("SELECT notification_id, topic, state FROM {} ORDER BY 1").format(EVENTS))
        return [(p, t, bytes(s)) for p, t, s in rows]


def data_key_owners(conninfo: str) -> list[UUID]:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        return [row[0] for row in conn.execute(SQL("SELECT memory_id FROM {}").format(DATA_KEYS))]


def test_a_published_document_leaves_no_plaintext_in_the_events_table(
    core: Core, service: KnowledgeService, settings: Settings
) -> None:
    word = f"zqx{uuid4().hex}qxz"
    first = service.publish(OWNER, marked(word), "vault.md", NS)
    edited = service.publish(OWNER, marked(word).replace("weekly", "daily"), "vault.md", NS)
    assert (first.outcome, edited.outcome, edited.version) == ("published", "published", 2)
    assert first.document_id is not None
    v1, v2 = stream(core, first.document_id)
    assert word in v1.title
    assert "weekly" in v1.body
    assert "daily" in v2.body
    conninfo = core.params.conninfo()
    assert events_holding(conninfo, [word, *plaintexts(v1), *plaintexts(v2)]) == []

    # the sealed form: content blanked, ciphertext beside it; identity and version in the clear
    for stored in (
        json.loads(state) for _, topic, state in all_states(conninfo) if topic == "KnowledgePublished"
    ):
        assert (stored["e"]["title"], stored["e"]["body"], stored["e"]["chunks"]) == ("", "", [])
        assert stored["e"]["content_hash"] == ""
        assert (stored["e"]["slug"], stored["e"]["tags"]) == ("vault", ["security"])
        assert stored["s"]
    # one data key per document, made with its first version and kept for the next
    assert data_key_owners(conninfo) == [first.document_id]

    # a process with nothing cached reads every version whole
    with open_core(settings) as fresh:
        assert [r.event for r in fresh.ledger.streams([first.document_id])[first.document_id]] == [v1, v2]
        assert fresh.ledger.verify().ok


def test_a_version_recorded_in_the_clear_before_sealing_still_decodes(
    core: Core, service: KnowledgeService, settings: Settings
) -> None:
    draft = parse_document(ONCALL, "oncall.md")
    policy = core.governance.write_policy(NS)
    old = decide_publish(OWNER, draft, NS, None, policy, datetime(2026, 1, 5, tzinfo=UTC))
    assert old is not None
    clear = StoredEvent(
        originator_id=old.document_id,
        originator_version=1,
        topic="KnowledgePublished",
        state=msgspec.json.encode(old),
    )
    (appended,) = core.ledger.recorder.append_groups([AppendGroup(events=[clear], tenant="acme")])
    assert not appended.conflict
    assert data_key_owners(core.params.conninfo()) == []

    assert stream(core, old.document_id) == [old]
    assert service.publish(OWNER, ONCALL, "oncall.md", NS).outcome == "unchanged"
    edited = service.publish(OWNER, ONCALL.replace("fifteen", "ten"), "oncall.md", NS)
    assert (edited.outcome, edited.version) == ("published", 2)
    # the first sealed version makes the document's key; the clear one needs none
    assert data_key_owners(core.params.conninfo()) == [old.document_id]
    [(_, _, v2_state)] = [s for s in all_states(core.params.conninfo()) if s[1] == "KnowledgePublished"][1:]
    assert v2_state.startswith(b'{"e":')
    assert b"ten minutes" not in v2_state
    with open_core(settings) as fresh:
        v1, v2 = [r.event for r in fresh.ledger.streams([old.document_id])[old.document_id]]
        assert v1 == old
        assert isinstance(v2, KnowledgePublished)
        assert "ten minutes" in v2.body
        assert fresh.ledger.verify().ok


def test_racing_first_publications_share_the_stored_key(core: Core, settings: Settings) -> None:
    """This service decided (no document, no key) before another publisher stored version 1
    and its key: the key it made is never stored nor used, and it re-decides on that key."""

    class Racing(KnowledgeService):
        reads = 0

        def current(self, document_id: UUID) -> KnowledgeState | None:
            self.reads += 1
            return None if self.reads == 1 else super().current(document_id)

        def _new_data_key(self, document_id: UUID) -> NewMemoryKey | None:
            return (
                self.ledger.new_data_key(document_id)
                if self.reads == 1
                else super()._new_data_key(document_id)
            )

    other = KnowledgeService(core.ledger, HashEmbedder(), core.governance.write_policy)
    first = other.publish(OWNER, ONCALL, "oncall.md", NS)
    racing = Racing(core.ledger, HashEmbedder(), core.governance.write_policy)
    second = racing.publish(OWNER, ONCALL.replace("fifteen", "ten"), "oncall.md", NS)
    assert (second.outcome, second.version, racing.reads) == ("published", 2, 2)
    assert first.document_id is not None
    assert data_key_owners(core.params.conninfo()) == [first.document_id]
    assert [e.version for e in stream(core, first.document_id)] == [1, 2]
    with open_core(settings) as fresh:
        bodies = [
            getattr(r.event, "body", "") for r in fresh.ledger.streams([first.document_id])[first.document_id]
        ]
        assert ["fifteen" in bodies[0], "ten minutes" in bodies[1]] == [True, True]


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def l3_answer(rt: Runtime) -> list[str]:
    """The knowledge blocks fault answers the expense question with (an agent below NS)."""
    agent = Identity(f"{NS}/alpha", "bot", "agent")
    answer = rt.working_sets.fault(agent, EXPENSES_QUESTION, after=rt.ledger.head_position())
    if not answer.hit:
        return []
    assert answer.source == "L3"
    return [b.content for b in answer.blocks if b.kind == "knowledge"]


def knowledge_rows(rt: Runtime) -> tuple[int, int, int]:
    with rt.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            SQL(
                "SELECT (SELECT count(*) FROM {s}.knowledge_documents) AS documents,"
                " (SELECT count(*) FROM {s}.knowledge_chunks) AS chunks,"
                " (SELECT count(*) FROM {s}.search_docs WHERE kind = 'knowledge') AS docs"
            ).format(s=Identifier(rt.ledger.schema))
        ).fetchone()
    assert row is not None
    return int(row["documents"]), int(row["chunks"]), int(row["docs"])


def test_a_sealed_document_is_found_by_fault_and_survives_a_rebuild(runtime: Runtime) -> None:
    service = KnowledgeService(runtime.ledger, runtime.core.embedder, runtime.core.governance.write_policy)
    result = service.publish(OWNER, EXPENSES, "expenses.md", NS)
    assert result.outcome == "published"
    assert (
        events_holding(runtime.core.params.conninfo(), ["180 euros", "Expense policy", "Economy class"]) == []
    )
    assert any("180 euros" in block for block in l3_answer(runtime))

    report = Rebuilder(runtime.reads.runner).rebuild("search_index", verify=True)
    assert report.switched
    assert report.differences == []
    assert knowledge_rows(runtime) == (1, 2, 2)
    assert any("180 euros" in block for block in l3_answer(runtime))


def test_a_destroyed_document_key_leaves_nothing_indexed_and_no_new_version(runtime: Runtime) -> None:
    service = KnowledgeService(runtime.ledger, runtime.core.embedder, runtime.core.governance.write_policy)
    result = service.publish(OWNER, EXPENSES, "expenses.md", NS)
    edited = service.publish(OWNER, EXPENSES.replace("180", "190"), "expenses.md", NS)
    assert (result.outcome, edited.version) == ("published", 2)
    assert result.document_id is not None
    assert any("190 euros" in block for block in l3_answer(runtime))
    before = runtime.ledger.verify()

    with psycopg.connect(runtime.core.params.conninfo(), autocommit=True) as conn:
        deleted = conn.execute(
            SQL("DELETE FROM {} WHERE memory_id = %s").format(DATA_KEYS), (result.document_id,)
        ).rowcount
    assert deleted == 1
    runtime.ledger.data_keys.forget([result.document_id])

    # every version decodes, to a tombstone: identity and version, no content
    versions = service.versions(result.document_id)
    assert [(e.version, e.slug, e.title, e.body, e.chunks, e.shredded) for e in versions] == [
        (1, "expenses", "", "", (), True),
        (2, "expenses", "", "", (), True),
    ]
    report = Rebuilder(runtime.reads.runner).rebuild("search_index")
    assert report.switched
    assert knowledge_rows(runtime) == (0, 0, 0)
    assert l3_answer(runtime) == []

    # a new key could not open the older versions: the slug is not published again
    again = service.publish(OWNER, EXPENSES, "expenses.md", NS)
    assert (again.outcome, again.code) == ("rejected", "version_conflict")
    assert "erased" in again.detail
    assert data_key_owners(runtime.core.params.conninfo()) == []
    after = runtime.ledger.verify()
    assert after.ok
    assert after.checked > before.checked
