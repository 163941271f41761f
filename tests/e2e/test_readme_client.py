"""The README's client example ("First five minutes for an agent"), run as it stands
against a real ``memwarden serve`` with a fresh agent key."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.processes import cli_key

pytestmark = pytest.mark.xdist_group(__name__)
README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("## First five minutes for an agent", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None, "the README's client example is gone"
    return found.group(1)


def test_the_readme_client_example_runs(
    module_server: tuple[subprocess.Popen[bytes], str], module_env: dict[str, str], tenant: str
) -> None:
    _server, base = module_server
    code = _example()
    assert "http://127.0.0.1:8000" in code
    namespace: dict[str, object] = {"KEY": cli_key(module_env, f"{tenant}/eng", "my-agent", "agent")}
    exec(compile(code.replace("http://127.0.0.1:8000", base), str(README), "exec"), namespace)
    hits = namespace["hits"]
    assert isinstance(hits, list)
    assert hits
    assert "arm64" in str(namespace["prompt"])
    then = namespace["then"]
    assert getattr(then, "as_of", None) is not None
