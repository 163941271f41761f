"""``POST /v1/compliance/asof`` and the ops routes, over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memwarden.projections.timeline.service import AsOfQuestion
from tests.e2e.api_helpers import Api


def test_asof_answers_in_scope_with_position_and_cursor(api: Api) -> None:
    writer = api.key("acme/eng", "agent-1", "agent")
    auditor = api.key("acme", "audit", "auditor")
    before = datetime.now(UTC) - timedelta(seconds=1)
    for n in range(3):
        assert api.mem(writer, "write", {"content": f"Deploy window {n} is on Tuesday"}).status_code == 200
    api.settle()
    now = datetime.now(UTC).isoformat()
    mine = api.call(writer, "/v1/compliance/asof", {"as_of": now})
    assert mine.status_code == 403  # agents are not compliance staff
    root = api.call(auditor, "/v1/compliance/asof", {"as_of": now})
    assert root.status_code == 200
    assert len(root.json()["memories"]) == 3  # compliance looks down: acme/eng is in acme's subtree
    page = api.call(auditor, "/v1/compliance/asof", {"as_of": now, "target": "acme/eng", "limit": 2})
    assert page.status_code == 200, page.text
    body = page.json()
    assert len(body["memories"]) == 2
    assert body["position"] > 0
    assert body["next_cursor"]
    rest = api.call(
        auditor,
        "/v1/compliance/asof",
        {"as_of": now, "target": "acme/eng", "limit": 2, "cursor": body["next_cursor"]},
    ).json()
    assert len(rest["memories"]) == 1
    assert rest["next_cursor"] is None
    past = api.call(
        auditor, "/v1/compliance/asof", {"as_of": before.isoformat(), "target": "acme/eng"}
    ).json()
    assert past["memories"] == []
    assert api.call(auditor, "/v1/compliance/asof", {"as_of": now, "target": "other/x"}).status_code == 403
    assert api.call(auditor, "/v1/compliance/asof", {"as_of": "2026-01-01T00:00:00"}).status_code == 400
    assert api.call(auditor, "/v1/compliance/asof", {"as_of": now, "bogus": 1}).status_code == 400
    question = AsOfQuestion(scope=("acme/eng", "acme"), as_of=datetime.fromisoformat(now))
    check = api.runtime.reads.time_travel.verify(question)
    assert check.ok, check.differences


def test_ops_projections_and_rebuild_are_owner_only(api: Api) -> None:
    owner = api.key("acme", "boss", "owner")
    admin = api.key("acme", "lead", "admin")
    writer = api.key("acme/eng", "agent-1", "agent")
    api.mem(writer, "write", {"content": "Pager rotation changes on Mondays"})
    api.settle()
    assert api.call(admin, "/v1/ops/projections", method="GET").status_code == 403
    listing = api.call(owner, "/v1/ops/projections", method="GET")
    assert listing.status_code == 200
    names = {p["name"] for p in listing.json()["projections"]}
    assert {"memory_objects", "memory_timeline"} <= names
    rebuilt = api.call(owner, "/v1/ops/projections/memory_objects/rebuild", {"verify": True})
    assert rebuilt.status_code == 200, rebuilt.text
    assert rebuilt.json()["differences"] == []
    assert rebuilt.json()["switched"] is True
    assert api.call(owner, "/v1/ops/projections/nope/rebuild", {}).status_code == 404
    assert api.call(admin, "/v1/ops/projections/memory_objects/rebuild", {}).status_code == 403
