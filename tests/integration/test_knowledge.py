"""Loading L3 knowledge documents onto the real ledger (PostgreSQL), with HashEmbedder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

import numpy as np
import pytest

from domain.embedding import EmbedderUnavailable, HashEmbedder, vector_from_bytes
from domain.embedding.base import Matrix
from domain.ledger.mapper import Recorded
from domain.model.errors import Forbidden
from domain.model.events import AuditRecorded, KnowledgePublished
from domain.model.identity import Identity
from domain.model.knowledge import KnowledgeState, knowledge_stream
from domain.model.policies import PolicyBody
from domain.services.core import Core
from domain.services.knowledge import KnowledgeService

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
