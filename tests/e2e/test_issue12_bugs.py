"""Regression tests of issue 12's bugs over HTTP: history of quarantined memories, as-of
over a subtree, HEAD on the health routes, Prometheus exposition, a docs page with no
outside assets, and an OpenAPI document whose error bodies are the ones the API sends."""

from __future__ import annotations

import pytest

from tests.e2e.api_helpers import Api

MANUAL = {
    "content": "Dana lives in Oslo",
    "subject": "dana",
    "attribute": "city",
    "value": "Oslo",
    "provenance": {"source": "manual"},
}
LOWER = {"content": "Dana lives in Bergen", "subject": "dana", "attribute": "city", "value": "Bergen"}


def versions(api: Api, key: str, memory_id: str) -> list[str] | None:
    """The ids of a memory's history as ``key`` sees it, or None for a 404."""
    answer = api.mem(key, "history", {"id": memory_id})
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return [step["id"] for step in answer.json()["versions"]]


@pytest.mark.parametrize("decision", ["uphold_new", "keep_old"])
def test_history_of_a_quarantined_memory_answers_whoever_may_see_it(api: Api, decision: str) -> None:
    member = api.key("acme/eng", "mia", "member")
    agent = api.key("acme/eng", "bot", "agent")
    reviewer = api.key("acme", "boss", "admin")
    auditor = api.key("acme", "audrey", "auditor")
    sibling = api.key("acme/sales", "sal", "admin")
    outsider = api.key("globex", "gus", "owner")
    old = api.mem(member, "write", MANUAL).json()["id"]
    new = api.mem(agent, "write", LOWER).json()
    assert new["outcome"] == "disputed"
    api.settle()

    # quarantined: invisible to reads, so to the agents' history; the reviewers see it
    assert api.mem(agent, "read", {"id": new["id"]}).status_code == 404
    assert versions(api, agent, new["id"]) is None
    assert versions(api, reviewer, new["id"]) == [new["id"]]
    assert versions(api, auditor, new["id"]) is None  # not a reviewer: quarantine holds
    assert versions(api, auditor, old) == [old]  # compliance staff look down their subtree
    for stranger in (sibling, outsider):
        assert versions(api, stranger, new["id"]) is None
        assert versions(api, stranger, old) is None

    resolved = api.call(reviewer, f"/v1/admin/disputes/{new['dispute_id']}/resolve", {"decision": decision})
    assert resolved.status_code == 200, resolved.text
    api.settle()

    assert api.mem(agent, "read", {"id": new["id"]}).status_code == 200
    for caller in (agent, member, reviewer, auditor):
        assert versions(api, caller, new["id"]) == [old, new["id"]]
        assert versions(api, caller, old) == [old, new["id"]]
    for stranger in (sibling, outsider):
        assert versions(api, stranger, new["id"]) is None
    steps = {s["id"]: s for s in api.mem(agent, "history", {"id": old}).json()["versions"]}
    settled = (old, new["id"]) if decision == "uphold_new" else (new["id"], old)
    assert steps[settled[0]]["superseded_by"] == settled[1]
