"""The synchronous band obeys the dial over HTTP (docs/architecture.md section 4, step 7): the
write's answer names the finding or the decision its own append made, the reviewer lists
them at the existing routes and overturns the decision, and the client reads the fields."""

from __future__ import annotations

from typing import Any

import msgspec

from memwarden_client.results import WriteResult
from tests.e2e.api_helpers import Api

NS = "acme/eng/platform"


def listed(api: Api, key: str, path: str) -> list[dict[str, Any]]:
    response = api.call(key, path, method="GET")
    assert response.status_code == 200, response.text
    body = response.json()
    items: list[dict[str, Any]] = body["items"]
    return items


def write(api: Api, key: str, content: str) -> dict[str, Any]:
    response = api.mem(key, "write", {"content": content})
    assert response.status_code == 200, response.text
    api.runtime.reads.wait_for(response.json()["position"])  # the next write's band sees it
    body: dict[str, Any] = response.json()
    return body


def test_under_lower_trust_the_write_names_its_finding(api: Api) -> None:
    alice, bob = api.key(NS, "alice", "agent"), api.key(NS, "bob", "agent")
    admin = api.key("acme/eng", "rev", "admin")
    old = write(api, alice, "Build logs are kept for 30 days")
    new = write(api, bob, "Build logs are kept for 90 days")
    assert (new["outcome"], new["supersedes"], new["decisions"]) == ("stored", [], [])
    (finding_id,) = new["findings"]
    client_result = msgspec.json.decode(msgspec.json.encode(new), type=WriteResult)  # as the client reads it
    assert [str(f) for f in client_result.findings] == [finding_id]
    findings = listed(api, admin, "/v1/admin/findings")
    assert [(f["id"], f["memory_a"], f["memory_b"], f["rule"]) for f in findings] == [
        (finding_id, old["id"], new["id"], "frame")
    ]
    assert findings[0]["cosine"] >= 0.75
    api.settle()
    assert api.mem(alice, "read", {"id": old["id"]}).json()["status"] == "active"


def test_under_auto_the_write_names_its_decision_and_a_reviewer_overturns_it(api: Api) -> None:
    alice, bob = api.key(NS, "alice", "agent"), api.key(NS, "bob", "agent")
    admin = api.key("acme/eng", "rev", "admin")
    put = api.call(admin, f"/v1/admin/policies/{NS}", {"conflict_review": "auto"}, method="PUT")
    assert put.status_code == 200, put.text
    old = write(api, alice, "The upload limit for attachments is 25 MB")
    new = write(api, bob, "The upload limit for attachments is 50 MB")
    assert (new["outcome"], new["supersedes"], new["findings"]) == ("superseded", [old["id"]], [])
    (decision_id,) = new["decisions"]
    decisions = listed(api, admin, "/v1/admin/decisions")
    assert [(d["id"], d["winner"], d["loser"], d["dial"], d["rule"]) for d in decisions] == [
        (decision_id, new["id"], old["id"], "auto", "frame")
    ]
    assert decisions[0]["explanation"]
    overturned = api.call(admin, f"/v1/admin/decisions/{decision_id}/overturn", {"reason": "25 MB holds"})
    assert overturned.status_code == 200, overturned.text
    api.settle()
    restored = api.mem(alice, "read", {"id": overturned.json()["restored"]}).json()
    assert (restored["content"], restored["status"]) == (
        "The upload limit for attachments is 25 MB",
        "active",
    )
    assert api.mem(alice, "read", {"id": new["id"]}).json()["status"] == "retired"
