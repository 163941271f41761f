"""``memwarden knowledge load``: the command line against a fresh database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import AuditRecorded, KnowledgePublished
from memwarden.domain.model.knowledge import knowledge_stream
from memwarden.domain.settings import Settings

DEPLOYS = """---
title: Deploys
tags: [ops]
---
# Deploys

Every deploy goes through the pipeline; nobody ships from a laptop.

## Rollback

Run the rollback job with the previous release tag. It takes about four minutes.
"""
DATABASES = """---
namespace: databases
---
# Databases

Failover is automatic; the replica in the other zone takes over within a minute.
"""


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Settings:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    return settings


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "infra").mkdir(parents=True)
    (root / "deploys.md").write_text(DEPLOYS, encoding="utf-8")
    (root / "infra" / "databases.md").write_text(DATABASES, encoding="utf-8")
    return root


def load(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str], str]:
    code = main(["knowledge", "load", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_load_publishes_then_reports_unchanged_then_the_next_version(
    cli_env: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines, _ = load(capsys, str(docs), "--namespace", "acme/eng/runbooks")
    assert code == 0
    assert lines == [
        "published v1 acme/eng/runbooks/deploys (2 chunks)",
        "published v1 acme/eng/runbooks/databases/databases (1 chunk)",
    ]
    code, lines, _ = load(capsys, str(docs), "--namespace", "acme/eng/runbooks")
    assert code == 0
    assert lines == [
        "unchanged v1 acme/eng/runbooks/deploys",
        "unchanged v1 acme/eng/runbooks/databases/databases",
    ]
    (docs / "deploys.md").write_text(DEPLOYS.replace("four", "six"), encoding="utf-8")
    code, lines, _ = load(capsys, str(docs), "--namespace", "acme/eng/runbooks")
    assert code == 0
    assert lines[0] == "published v2 acme/eng/runbooks/deploys (2 chunks)"
    with Runtime(cli_env, follow=False) as runtime:
        document_id = knowledge_stream("acme/eng/runbooks", "deploys")
        versions = runtime.ledger.streams([document_id])[document_id]
        assert [r.originator_version for r in versions] == [1, 2]
        audits = [
            r.event
            for r in runtime.ledger.read(0, 1_000)
            if isinstance(r.event, AuditRecorded) and r.event.op == "knowledge_publish"
        ]
        assert len(audits) == 6
        assert {a.actor for a in audits} == {"operator@cli"}
        assert {(a.namespace, a.role) for a in audits} == {("acme", "owner")}
    assert main(["ledger", "verify"]) == 0


def test_a_rejected_file_is_reported_and_exits_non_zero_while_the_others_load(
    cli_env: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (docs / "broken.md").write_text("---\ntitle: [oops\n---\nSome body text.\n", encoding="utf-8")
    (docs / "binary.md").write_bytes(b"\xff\xfe\x00garbage")
    code, lines, err = load(capsys, str(docs), "--namespace", "acme/eng")
    assert code == 1
    assert err == ""
    assert lines[0] == "rejected binary.md: not UTF-8 text (byte 0)"
    assert lines[1].startswith("rejected broken.md: invalid YAML front matter at line ")
    assert lines[2:] == [
        "published v1 acme/eng/deploys (2 chunks)",
        "published v1 acme/eng/databases/databases (1 chunk)",
    ]


def test_json_output_and_acting_as_a_named_owner(
    cli_env: Settings, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines, _ = load(capsys, str(docs), "--as", "acme/eng/dana", "--json")
    assert code == 0
    results = json.loads("\n".join(lines))
    assert [(r["path"], r["outcome"], r["namespace"], r["slug"], r["version"]) for r in results] == [
        ("deploys.md", "published", "acme/eng", "deploys", 1),
        ("infra/databases.md", "published", "acme/eng/databases", "databases", 1),
    ]
    assert all(r["embedded"] and r["position"] > 0 for r in results)
    with Runtime(cli_env, follow=False) as runtime:
        head = runtime.ledger.stream_heads([knowledge_stream("acme/eng", "deploys")])
        (recorded,) = head.values()
        assert isinstance(recorded.event, KnowledgePublished)
        assert recorded.event.published_by == "dana"


def test_refusals_of_the_whole_command_are_clear_and_exit_2(
    cli_env: Settings, docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load(capsys, str(docs))[2].startswith("refused (invalid_request): give --namespace")
    code, _, err = load(capsys, str(tmp_path / "missing"), "--namespace", "acme")
    assert code == 2
    assert "is not a directory" in err
    code, _, err = load(capsys, str(docs), "--as", "acme/eng/dana", "--namespace", "acme/sales")
    assert code == 2
    assert err.startswith("refused (outside_subtree)")
    code, _, err = load(capsys, str(docs), "--namespace", "acme//eng")
    assert code == 2
    assert "namespace segment" in err


def test_no_embedder_loads_lexical_only_and_says_so(
    cli_env: Settings, docs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "none")
    code, lines, _ = load(capsys, str(docs), "--namespace", "acme")
    assert code == 0
    assert lines[0] == "published v1 acme/deploys (2 chunks, lexical only: embedding unavailable)"


def test_the_default_embedder_is_the_bundled_model(
    cli_env: Settings, docs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMWARDEN_EMBEDDER")
    code, lines, _ = load(capsys, str(docs), "--namespace", "acme", "--json")
    assert code == 0
    with Runtime(cli_env, follow=False) as runtime:
        document_id = knowledge_stream("acme", "deploys")
        (recorded,) = runtime.ledger.streams([document_id])[document_id]
        assert isinstance(recorded.event, KnowledgePublished)
        assert recorded.event.embedding_model == "all-MiniLM-L6-v2-int8"
        assert all(c.embedding is not None and len(c.embedding) == 768 for c in recorded.event.chunks)
    assert all(r["embedded"] for r in json.loads("\n".join(lines)))
