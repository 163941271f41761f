"""``memwarden --help`` loads no heavy module: every command imports what it runs when it
runs (api/cli/main.py), so the parser alone costs the interpreter's start-up and argparse.

Checked by the modules a fresh interpreter holds after answering, not by a timing: a
timing on a shared machine would either be loose enough to miss a regression or flaky.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "onnxruntime",
    "tokenizers",
    "numpy",
    "litestar",
    "uvicorn",
    "psycopg",
    "psycopg_pool",
    "eventsourcing",
    "pgvector",
    "redis",
    "dramatiq",
    "httpx",
    "cryptography",
    "rich",
    "yaml",
    "jinja2",
    "mcp",
    "anyio",
)
"""Third-party packages no command line needs to build its parser."""
HEAVY_OWN = (
    "memwarden.bootstrap",
    "memwarden.domain.services",
    "memwarden.domain.ledger",
    "memwarden.domain.embedding",
    "memwarden.projections",
    "memwarden.api.http",
    "memwarden.workers.main",
    "memwarden.workers.actors",
    "memwarden_client.client",
)
"""memwarden's own modules that pull in the above (or the whole runtime)."""

PROBE = """
import json, sys
from memwarden.api.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted(sys.modules)))
"""


def _modules_after(argv: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert "usage: memwarden" in done.stdout, done.stderr[-2000:]
    listed: list[str] = json.loads(done.stderr.strip().splitlines()[-1])
    return listed


def _heavy(modules: list[str]) -> list[str]:
    return [
        name
        for name in modules
        if name.split(".", 1)[0] in HEAVY
        or any(name == own or name.startswith(own + ".") for own in HEAVY_OWN)
    ]


@pytest.mark.parametrize(
    "argv", [["--help"], ["keys", "list", "--help"], ["bench", "--help"]], ids=["top", "keys-list", "bench"]
)
def test_help_imports_no_heavy_module(argv: list[str]) -> None:
    modules = _modules_after(argv)
    assert "argparse" in modules  # the probe did run the command line
    assert _heavy(modules) == []


def test_the_check_sees_a_heavy_import() -> None:
    """The check can fail: the runtime a command opens is flagged."""
    probe = "import json, sys, memwarden.bootstrap.runtime; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    heavy = _heavy(json.loads(done.stdout))
    assert {"psycopg", "numpy", "memwarden.bootstrap"} <= {name.split(".", 1)[0] for name in heavy} | set(
        heavy
    )
