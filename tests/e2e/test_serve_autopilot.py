"""`memwarden serve` without ``REDIS_URL`` runs the conflict autopilot in-process (it
probes no Redis: one answering on the default port may be anyone's): a contradiction
written over HTTP becomes a finding with nothing else running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from memwarden.domain.ledger.database import ConnectionParams
from tests.conftest import url_of
from tests.processes import REPO_ROOT, cli_key, free_port, ready, wait_until


@pytest.mark.slow
def test_serve_without_redis_judges_in_process(database: ConnectionParams, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": url_of(database),
        "MEMWARDEN_DATA_DIR": str(tmp_path / "home"),
    }
    agent = cli_key(env, "acme/eng", "bot", "agent")
    org = cli_key(env, "acme", "lead", "agent")  # an ancestor's fact: never settled by a write
    admin = cli_key(env, "acme", "boss", "admin")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "memwarden.api.cli.main", "serve", "--port", str(port)], cwd=REPO_ROOT, env=env
    )
    base = f"http://127.0.0.1:{port}"

    def findings() -> list[dict[str, str]]:
        response = httpx.get(
            f"{base}/v1/admin/findings", headers={"Authorization": f"Bearer {admin}"}, timeout=10
        )
        assert response.status_code == 200, response.text
        found: list[dict[str, str]] = response.json()["items"]
        return found

    try:
        wait_until(lambda: ready(base), 120)
        ids = []
        for key, content in ((org, "Payroll runs on Friday"), (agent, "Payroll runs on Thursday")):
            response = httpx.post(
                f"{base}/v1/mem/write",
                json={"content": content},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 200, response.text
            ids.append(response.json()["id"])
        wait_until(lambda: bool(findings()), 60)
        assert [(f["memory_a"], f["memory_b"]) for f in findings()] == [tuple(ids)]
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
