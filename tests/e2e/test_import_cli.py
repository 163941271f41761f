"""`memwarden import PATH` as the CLI runs it: JSONL, CSV and a Markdown folder through
write_batch's service path; bad records are rejected with their line (or file) and never
stop the import; a second run skips what the first did, a run from the start dedupes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memwarden.api.cli.importer import ProgressFile, read_source, run_import
from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
AS = "acme/eng/dana"


@pytest.fixture
def cli_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env["DATABASE_URL"] = settings.database_url or ""
    env["MEMWARDEN_DATA_DIR"] = str(settings.data_dir)
    env["MEMWARDEN_EMBEDDER"] = "hash"
    return env


def run_import_cli(env: dict[str, str], path: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", "import", str(path), "--as", AS, "--json", *extra],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def written(settings: Settings) -> list[MemoryWritten]:
    with open_core(settings) as core:
        return [r.event for r in core.ledger.read(0, 100_000) if isinstance(r.event, MemoryWritten)]


def rejected_where(summary: dict[str, Any]) -> list[str]:
    return [r["where"] for r in summary["rejections"]]


JSONL_LINES = [
    {"content": "The platform team deploys on Fridays.", "tags": ["ops"]},
    {"content": "Billing runs nightly at two.", "event_time": "2026-03-01T02:00:00Z"},
    "this line is not JSON",
    "",
    {"content": "typo in a field name", "tagz": ["x"]},
    {"content": "NUL \u0000 inside"},
    {"content": "the platform team deploys on fridays"},
    {
        "content": "Search is served by pgvector.",
        "subject": "search",
        "attribute": "engine",
        "value": "pgvector",
    },
    [1, 2],
]


def test_jsonl_import_rejects_bad_lines_and_resumes(
    cli_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    source = tmp_path / "memories.jsonl"
    source.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in JSONL_LINES) + "\n"
    )

    code, first, stderr = run_import_cli(cli_env, source, "--batch", "3")
    assert code == 1  # some lines were rejected; the import still ran to the end
    assert first["records"] == 8
    assert first["outcomes"] == {"stored": 3, "deduplicated": 1, "rejected": 4}
    assert rejected_where(first) == ["line 3", "line 5", "line 6", "line 9"]
    reasons = {r["where"]: r["reason"] for r in first["rejections"]}
    assert reasons["line 6"] == "unstorable"
    assert "tagz" in next(r["detail"] for r in first["rejections"] if r["where"] == "line 5")
    assert "import [" in stderr
    assert "\r" not in stderr  # not a terminal: plain lines
    assert len(written(settings)) == 3

    code, again, _ = run_import_cli(cli_env, source)
    assert code == 0
    assert (again["skipped"], again["outcomes"]) == (8, {})

    code, restart, _ = run_import_cli(cli_env, source, "--from-start")
    assert restart["outcomes"] == {"deduplicated": 4, "rejected": 4}
    assert len(written(settings)) == 3  # nothing doubled


def test_csv_import_reads_fields_tags_and_provenance(
    cli_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    source = tmp_path / "memories.csv"
    source.write_text(
        "content,tags,subject,attribute,value,provenance.source,event_time\n"
        "The cache is warm.,ops; cache,,,,document,2026-03-01T09:00:00+01:00\n"
        "Dana lives in Berlin,,dana,city,Berlin,,\n"
        "A bad month,,,,,,2026-13-01T00:00:00Z\n"
        ",,,,,,\n"
        '"Runbooks live in the wiki,\nnext to the on-call rota.",docs,,,,,\n'
        "one,two,three,four,five,six,seven,eight\n"
    )
    code, first, _ = run_import_cli(cli_env, source)
    assert code == 1
    assert first["outcomes"] == {"stored": 3, "rejected": 3}
    assert rejected_where(first) == ["line 4", "line 5", "line 8"]
    memories = {m.content: m for m in written(settings)}
    cache = memories["The cache is warm."]
    assert cache.tags == ("ops", "cache")
    assert cache.provenance[0].source == "document"
    assert cache.event_time is not None
    assert cache.event_time.utcoffset() is not None
    assert memories["Dana lives in Berlin"].value == "Berlin"
    assert "Runbooks live in the wiki,\nnext to the on-call rota." in memories

    code, again, _ = run_import_cli(cli_env, source)
    assert (again["skipped"], again["outcomes"]) == (6, {})
    assert len(written(settings)) == 3


def test_markdown_folder_import_one_memory_per_file(
    cli_env: dict[str, str], settings: Settings, tmp_path: Path
) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    (folder / "a.md").write_text(
        "---\ntags: [ops]\nevent_time: 2026-03-01\n---\nDeploys happen on Fridays.\n\nRollbacks on Mondays.\n"
    )
    (folder / "sub" / "b.md").write_text("# Billing\n\nBilling runs nightly at two.\n")
    (folder / "c.md").write_text("---\ncolour: red\n---\nThe wall is red.\n")
    (folder / "d.md").write_text("---\ntags: [x]\nThe front matter never closes.\n")
    (folder / ".hidden" / "e.md").write_text("Never imported.\n")

    code, first, _ = run_import_cli(cli_env, folder)
    assert code == 1
    assert first["outcomes"] == {"stored": 2, "rejected": 2}
    assert rejected_where(first) == ["c.md", "d.md"]
    memories = {m.content: m for m in written(settings)}
    note = memories["Deploys happen on Fridays.\n\nRollbacks on Mondays."]
    assert note.tags == ("ops",)
    assert note.event_time is not None
    assert note.event_time.isoformat() == "2026-03-01T00:00:00+00:00"
    assert "# Billing\n\nBilling runs nightly at two." in memories

    code, again, _ = run_import_cli(cli_env, folder)
    assert (again["skipped"], again["outcomes"]) == (4, {})
    (folder / "f.md").write_text("A new note arrives.\n")  # the folder changed: all of it again
    code, changed, _ = run_import_cli(cli_env, folder)
    assert changed["outcomes"] == {"stored": 1, "deduplicated": 2, "rejected": 2}
    assert len(written(settings)) == 3


def test_an_interrupted_run_resumes_after_its_last_batch(
    core: Core, settings: Settings, tmp_path: Path
) -> None:
    source = tmp_path / "facts.jsonl"
    source.write_text(
        "".join(json.dumps({"content": f"Service {n} belongs to team {n}."}) + "\n" for n in range(10))
    )
    records, fingerprint = read_source(source)
    identity = Identity("acme/eng", "importer", "owner")
    progress = ProgressFile(settings.data_dir, source, identity, fingerprint)
    progress.save(4)  # what a run stopped after two batches of two leaves behind

    with (tmp_path / "progress.log").open("w") as log:
        outcomes, rejections, skipped = run_import(
            core.memory, identity, records, progress, log, batch_size=2
        )
    assert (skipped, dict(outcomes), rejections) == (4, {"stored": 6}, [])
    assert progress.done() == 10
    contents = {
        e.content for e in [r.event for r in core.ledger.read(0, 10_000)] if isinstance(e, MemoryWritten)
    }
    assert contents == {f"Service {n} belongs to team {n}." for n in range(4, 10)}
    audits = [r.event for r in core.ledger.read(0, 10_000) if isinstance(r.event, AuditRecorded)]
    assert [a.op for a in audits].count("write_batch") == 3
    lines = (tmp_path / "progress.log").read_text().splitlines()
    assert lines[-1].startswith("import [##############################] 10/10 100%")
