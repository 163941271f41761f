"""``memwarden keys list``: when the keys read model reflects the ledger head (a projector
follows it), the listing is read straight from it, and the command loads no runtime, no
ledger and no model code; when it is behind, the command catches the read models up first,
so a key issued a moment ago is listed either way."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings, environment_with
from memwarden.projections.governance.views import KEYS_PROJECTION
from tests.e2e.api_helpers import issue_key
from tests.e2e.test_cli_startup import HEAVY
from tests.processes import REPO_ROOT

NOT_FOR_A_LISTING = (
    "memwarden.bootstrap.runtime",
    "memwarden.bootstrap.core",
    "memwarden.domain.embedding",
    "memwarden.domain.ledger.app",
    "memwarden.domain.services",
    "memwarden.projections.reads",
    "memwarden.projections.search",
)
"""The runtime and what only it loads: the ledger, the services, the models' code."""
FOR_A_LISTING = ("psycopg",)
"""What the listing does need: the database driver."""

PROBE = """
import json, sys
from memwarden.api.cli.main import main
code = main(sys.argv[1:])
sys.stderr.write(json.dumps(sorted(sys.modules)) + "\\n")
raise SystemExit(code)
"""


def _deployment(settings: Settings) -> dict[str, str]:
    return {"DATABASE_URL": settings.database_url or "", "MEMWARDEN_DATA_DIR": str(settings.data_dir)}


def _keys_behind(runtime: Runtime) -> bool:
    return runtime.reads.runner.positions()[KEYS_PROJECTION] < runtime.ledger.head_position()


def _not_needed(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if (name.split(".", 1)[0] in HEAVY and name.split(".", 1)[0] not in FOR_A_LISTING)
        or any(name == own or name.startswith(own + ".") for own in NOT_FOR_A_LISTING)
    ]


def test_a_current_listing_loads_no_runtime(settings: Settings) -> None:
    with Runtime(settings, follow=False) as runtime:
        issue_key(runtime, "acme/eng", "bot", "agent")
        issue_key(runtime, "zeta", "ops", "admin")
        # A background pass may append between the catch-up and the listing (which is then
        # rightly behind and takes the runtime path): caught up again, the next one is current.
        for attempt in range(3):
            runtime.reads.runner.catch_up()
            assert not _keys_behind(runtime)
            modules = _listing_modules(settings)
            if not _not_needed(modules) or attempt == 2:
                break
    assert "psycopg" in modules  # the probe did read the database
    assert _not_needed(modules) == []


def _listing_modules(settings: Settings) -> list[str]:
    """What ``memwarden keys list`` loaded; it must list the two keys."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "keys", "list", "--json"],
        cwd=REPO_ROOT,
        env=environment_with(_deployment(settings)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed = json.loads(done.stdout)
    assert [(k["namespace"], k["actor"]) for k in listed] == [("acme/eng", "bot"), ("zeta", "ops")]
    modules: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return modules


def test_the_check_sees_the_runtime() -> None:
    """The check can fail: what a runtime loads is flagged."""
    probe = "import json, sys, memwarden.bootstrap.runtime; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    flagged = _not_needed(json.loads(done.stdout))
    assert {"memwarden.bootstrap.runtime", "numpy"} <= {*flagged, *(n.split(".", 1)[0] for n in flagged)}


def test_a_listing_behind_the_head_catches_up_first(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with Runtime(settings, follow=False) as runtime:
        issue_key(runtime, "acme/eng", "bot", "agent")
        assert _keys_behind(runtime)  # nothing projected the key yet
    for name, value in _deployment(settings).items():
        monkeypatch.setenv(name, value)
    assert main(["keys", "list", "--namespace", "acme/eng", "--json"]) == 0
    assert [k["actor"] for k in json.loads(capsys.readouterr().out)] == ["bot"]
    with Runtime(settings, follow=False) as runtime:
        assert not _keys_behind(runtime)
