"""A key's actor name is what every audit record and reviewer sees: NUL, lone surrogates and
invisible characters (zero-width space, BOM, bidi controls) are refused by the admin key
route, ``memwarden keys create`` and ``--as`` alike, with a message naming the character,
and no key is issued."""

from __future__ import annotations

import json

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import KeyIssued
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api

POISON = {
    "NUL": ("bo\x00t", "actor contains a NUL character (U+0000)"),
    "lone high surrogate": ("bo\ud800t", "actor contains a lone surrogate (U+D800)"),
    "lone low surrogate": ("bot\udfff", "actor contains a lone surrogate (U+DFFF)"),
    "zero-width space": ("bot\u200b", "actor contains an invisible character (U+200B)"),
    "byte order mark": ("\ufeffbot", "actor contains an invisible character (U+FEFF)"),
    "right-to-left override": ("bot\u202egnp.exe", "actor contains an invisible character (U+202E)"),
    "right-to-left isolate": ("\u2067bot", "actor contains an invisible character (U+2067)"),
    "left-to-right mark": ("bot\u200e", "actor contains an invisible character (U+200E)"),
}
CASES = pytest.mark.parametrize(("actor", "detail"), POISON.values(), ids=POISON.keys())


def issued_actors(runtime: Runtime) -> list[str]:
    return [r.event.actor for r in runtime.ledger.read(0, 10_000) if isinstance(r.event, KeyIssued)]


@CASES
def test_the_admin_key_route_refuses_the_actor(api: Api, actor: str, detail: str) -> None:
    admin = api.key("acme", "boss", "admin")
    body = json.dumps({"target": "acme/eng", "actor": actor, "role": "agent"})  # \\uXXXX escapes
    answer = api.client.post(
        "/v1/admin/keys",
        content=body.encode("ascii"),
        headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_request"
    assert detail in answer.json()["detail"]
    assert issued_actors(api.runtime) == ["boss"]
    refusals = [r for r in api.audit_records() if r.op == "admin.keys.create" and r.actor == "boss"]
    assert [r.outcome for r in refusals] == ["denied"]
    assert refusals[0].detail.isprintable()


def test_the_admin_key_route_still_issues_visible_names(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    for actor in ("dana@acme.example", "Ørjan", "李雷", "ci-bot_2"):
        made = api.call(admin, "/v1/admin/keys", {"target": "acme/eng", "actor": actor, "role": "agent"})
        assert made.status_code == 200, made.text
        assert api.mem(made.json()["key"], "stats").status_code == 200
    assert issued_actors(api.runtime) == ["boss", "dana@acme.example", "Ørjan", "李雷", "ci-bot_2"]


@CASES
def test_the_cli_refuses_the_actor(
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    actor: str,
    detail: str,
) -> None:
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    assert main(["keys", "create", "acme/eng", actor, "agent"]) == 1
    assert detail in capsys.readouterr().err
    assert main(["knowledge", "load", str(settings.data_dir), "--as", f"acme/eng/{actor}"]) != 0
    assert detail.removeprefix("actor ") in capsys.readouterr().err
    with Runtime(settings, follow=False) as runtime:
        assert issued_actors(runtime) == []
