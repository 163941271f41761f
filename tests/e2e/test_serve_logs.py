"""``memwarden serve`` at its default ``--log-level warning`` writes no INFO line of its own or
of a library while the console is used (each console page is an httpx call into the API,
which used to log one INFO line per click)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx

from memwarden.domain.ledger.database import ConnectionParams
from tests.conftest import url_of
from tests.processes import TIMED, cli_key, serving

pytestmark = TIMED


def test_console_clicks_log_nothing_at_the_default_level(database: ConnectionParams, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": url_of(database),
        "MEMWARDEN_DATA_DIR": str(tmp_path / "home"),
        "MEMWARDEN_EMBEDDER": "hash",
    }
    env.pop("MEMWARDEN_LOG_LEVEL", None)
    owner = cli_key(env, "acme", "olga", "owner")
    log = tmp_path / "serve.log"
    with log.open("wb") as out, serving(env, log=out) as (_server, base):
        origin = {"Origin": base, "Sec-Fetch-Site": "same-origin"}
        with httpx.Client(base_url=base) as browser:
            signed_in = browser.post("/console/login", data={"key": owner}, headers=origin)
            assert signed_in.status_code == 303, signed_in.text[:300]
            # the session cookie is Secure: sent by hand over this plain-HTTP loopback
            session = {"Cookie": f"memwarden_console={signed_in.cookies['memwarden_console']}"}
            for page in ("/console/audit", "/console/review/findings", "/console/audit"):
                shown = browser.get(page, headers=session)
                assert shown.status_code == 200, page
        api = httpx.post(f"{base}/v1/mem/stats", headers={"Authorization": f"Bearer {owner}"})
        assert api.status_code == 200
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    assert not [line for line in lines if "INFO" in line or "HTTP Request" in line], lines
