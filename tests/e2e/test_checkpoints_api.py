"""GET /v1/compliance/checkpoints: the checkpoints the ledger signed (on demand over HTTP and
by `memwarden ledger checkpoint`), newest first, paged, each still verifying the chain."""

from __future__ import annotations

import json
import os

from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.processes import cli_last_line

ROUTE = "/v1/compliance/checkpoints"


def cli_checkpoint(settings: Settings) -> dict[str, object]:
    """A checkpoint made by the CLI on the same database and data directory."""
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url or "",
        "MEMWARDEN_DATA_DIR": str(settings.data_dir),
        "MEMWARDEN_EMBEDDER": "hash",
    }
    made: dict[str, object] = json.loads(cli_last_line(env, "ledger", "checkpoint", "--json"))
    return made


def walk(api: Api, key: str, limit: int) -> list[list[dict[str, object]]]:
    """Every page of the listing, following ``cursor`` to the end."""
    pages, cursor = [], ""
    while True:
        answer = api.call(key, f"{ROUTE}?limit={limit}{cursor}", method="GET")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"items", "cursor"}
        pages.append(body["items"])
        if body["cursor"] is None:
            return pages
        cursor = f"&cursor={body['cursor']}"


def test_checkpoints_are_listed_newest_first_and_verify(api: Api, settings: Settings) -> None:
    auditor = api.key("acme", "audrey", "auditor")
    assert api.call(auditor, ROUTE, method="GET").json() == {"items": [], "cursor": None}
    made = []
    for content in ("one", "two", "three"):
        api.mem(api.key("acme/eng", f"bot-{content}", "agent"), "write", {"content": f"Fact {content}"})
        answer = api.call(auditor, "/v1/compliance/ledger/checkpoint")
        assert answer.status_code == 200
        made.append(answer.json())
    made.append(cli_checkpoint(settings))

    pages = walk(api, auditor, limit=3)
    assert [len(p) for p in pages] == [3, 1]
    listed = [c for page in pages for c in page]
    assert listed == list(reversed(made))  # exactly what was signed, newest first
    assert [c["position"] for c in listed] == sorted((c["position"] for c in listed), reverse=True)
    assert walk(api, auditor, limit=4) == [listed, []]  # a full last page, then an empty one
    for checkpoint in listed:
        verified = api.call(auditor, "/v1/compliance/ledger/verify", {"checkpoint": checkpoint}).json()
        assert verified["ok"], verified

    owner = api.key("other", "olga", "owner")  # the ledger is one chain: any tenant sees its heads
    assert api.call(owner, f"{ROUTE}?limit=1", method="GET").json()["items"] == listed[:1]
    audited = [r for r in api.audit_records() if r.op == "compliance.checkpoints"]
    assert audited
    assert audited[-1].outcome == "ok"


def test_bad_checkpoint_listings_are_refused(api: Api) -> None:
    auditor = api.key("acme", "audrey", "auditor")
    agent = api.key("acme/eng", "bot", "agent")
    member = api.key("acme/eng", "mia", "member")
    for key in (agent, member):
        refused = api.call(key, ROUTE, method="GET")
        assert refused.status_code == 403
        assert refused.json()["error"] == "forbidden"
    assert api.call(None, ROUTE, method="GET").status_code == 401
    for query in (
        "limit=0",
        "limit=1001",
        "limit=ten",
        "cursor=abc",
        "cursor=-1",
        "cursor=1:2",
        "cursor=%D9%A3",  # an Arabic-Indic digit: isdigit() but not a position
        "cursor=1234567890123456789",
        "colour=red",
    ):
        answer = api.call(auditor, f"{ROUTE}?{query}", method="GET")
        assert answer.status_code == 400, (query, answer.text)
        assert answer.json()["error"] == "invalid_request", query
    named = api.call(auditor, f"{ROUTE}?namespace=acme", method="GET")
    assert named.status_code == 400
    assert named.json()["error"] == "identity_in_body"
    assert {r.outcome for r in api.audit_records() if r.op == "compliance.checkpoints"} == {"denied"}
