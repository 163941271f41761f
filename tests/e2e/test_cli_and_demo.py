from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from memwarden.api.cli.demo import run_demo
from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import Settings
from tests.conftest import url_of


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Settings:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    return settings


def test_demo_tells_the_whole_story(settings: Settings) -> None:
    lines: list[str] = []
    with Runtime(settings) as runtime:
        facts = run_demo(runtime, lines.append)
    assert facts["outcomes"] == ["stored", "deduplicated", "superseded", "disputed"]
    assert facts["verified"] == "verified"
    assert facts["self_verify"].startswith("refused (forbidden")
    assert facts["report"].ok
    assert facts["history"] == 3  # both addresses and the rejected challenger
    assert facts["search"][0] == "Dana's home address is 9 Elm Road"  # the current fact first
    assert "Dana's home address is 5 Oak Avenue" not in facts["search"]  # rejected in review
    assert facts["capsule_ok"]
    assert facts["fault"] is None  # nothing about parking: a miss
    assert not facts["tampered"].ok
    assert facts["tampered"].first_bad_position == facts["tampered_position"]
    assert facts["finding"] == "frame"  # the unslotted contradiction, found by the autopilot
    assert facts["proposal"] == "near_duplicate"  # drafted by consolidation, pending review
    text = "\n".join(lines)
    assert "not found (quarantined)" in text
    assert "-> finding for a reviewer" in text
    assert "-> proposal (near_duplicate, 2 sources, pending_review)" in text
    assert f"chain BROKEN at position {facts['tampered_position']}" in text


def test_ledger_verify_exit_codes_and_first_bad_position(
    cli_env: Settings, database: ConnectionParams, capsys: pytest.CaptureFixture[str]
) -> None:
    with Runtime(cli_env) as runtime:
        run_demo(runtime, lambda _line: None)
    assert main(["ledger", "verify", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["checked"] > 10
    with psycopg.connect(database.conninfo(), autocommit=True) as conn:
        conn.execute("UPDATE memwarden.events SET topic = 'Forged' WHERE notification_id = 7")
    assert main(["ledger", "verify"]) == 1
    assert "first bad position 7" in capsys.readouterr().out


def test_checkpoint_round_trip_and_forgery(
    cli_env: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with Runtime(cli_env) as runtime:
        run_demo(runtime, lambda _line: None)
    assert main(["ledger", "checkpoint"]) == 0
    checkpoint = json.loads(capsys.readouterr().out)
    good = tmp_path / "checkpoint.json"
    good.write_text(json.dumps(checkpoint))
    assert main(["ledger", "verify", "--checkpoint", str(good)]) == 0
    capsys.readouterr()
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({**checkpoint, "position": checkpoint["position"] - 1}))
    assert main(["ledger", "verify", "--checkpoint", str(forged)]) == 1
    assert "signature does not verify" in capsys.readouterr().err
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    assert main(["ledger", "verify", "--checkpoint", str(garbage)]) == 2


def test_projections_status_reports_positions(cli_env: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    with Runtime(cli_env) as runtime:
        run_demo(runtime, lambda _line: None)
        head = runtime.ledger.head_position()
        runtime.reads.wait_for(head)
    assert main(["projections", "status", "--json"]) == 0
    statuses = {s["name"]: s for s in json.loads(capsys.readouterr().out)}
    assert {"memory_objects", "disputes", "keys", "audit", "shares"} <= set(statuses)
    assert all(s["position"] == head and s["lag"] == 0 for s in statuses.values())


@pytest.mark.slow
@pytest.mark.minilm  # the README's command as it is: the default embedder too
def test_the_console_script_runs_the_demo_on_the_embedded_default(tmp_path: Path) -> None:
    """The README's first command, end to end: no DATABASE_URL, a fresh data directory."""
    script = shutil.which("memwarden", path=str(Path(sys.executable).parent))
    assert script is not None
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["MEMWARDEN_DATA_DIR"] = str(tmp_path / "home")
    done = subprocess.run([script, "demo"], env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr
    assert "demo complete." in done.stdout
    assert "chain holds" in done.stdout
    again = subprocess.run(
        [script, "ledger", "verify"], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("ok: ")
    assert not list((tmp_path / "home" / "pg").glob("postmaster.pid")), "the last process stops the server"


def test_url_helper_round_trips(database: ConnectionParams) -> None:
    assert ConnectionParams.from_url(url_of(database)) == database
