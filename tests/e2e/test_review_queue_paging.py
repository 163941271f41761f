"""The reviewers' queues page (API.md "Lists"): ``{items, cursor, count}``, newest or oldest
first, a walk that sees every item once while new ones arrive, filters by subtree, writer,
rule and time, each a typed query parameter the framework validates."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.e2e.review_seed import HOLDER, TEAM_CONTRADICTION

TEAMS = 7
ROUTE = "/v1/admin/findings"


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def open_finding(rt: Runtime, team: int) -> None:
    """One contradiction written by team ``team``'s own agent, judged by the autopilot's pass."""
    who = Identity(namespace=f"acme/team{team}", actor=f"bot{team}", role="agent")
    claim = ProvenanceClaim(source="conversation")
    for content in TEAM_CONTRADICTION:
        result = rt.memory.write(who, WriteMemory(content=content, provenance=claim))
        assert result.outcome == "stored", result
        assert result.id is not None
    rt.autopilot.judge_memory(result.id, result.position, HOLDER)


def listed(api: Api, key: str, **params: Any) -> dict[str, Any]:
    answer = api.call(key, ROUTE, method="GET", params=params)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert set(body) == {"items", "cursor", "count", "statements"}
    return body


def walk(api: Api, key: str, **params: Any) -> list[dict[str, Any]]:
    """Every item, page after page, from ``params``' cursor (if any) to the end."""
    seen: list[dict[str, Any]] = []
    while True:
        page = listed(api, key, **params)
        seen += page["items"]
        if page["cursor"] is None:
            return seen
        params = {**params, "cursor": page["cursor"]}


def test_a_queue_pages_both_ways_counts_and_filters(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    for team in range(TEAMS):
        open_finding(api.runtime, team)
    api.settle()

    first = listed(api, owner, limit=3)
    assert (len(first["items"]), first["count"]) == (3, TEAMS)
    oldest = walk(api, owner, limit=3)
    assert [f["namespace"] for f in oldest] == [f"acme/team{t}" for t in range(TEAMS)]
    assert [f["id"] for f in walk(api, owner, limit=2, order="newest")] == [f["id"] for f in reversed(oldest)]

    # a finding opened mid-walk is neither lost nor shown twice on the oldest-first walk
    page = listed(api, owner, limit=4)
    open_finding(api.runtime, TEAMS)
    api.settle()
    rest = walk(api, owner, limit=4, cursor=page["cursor"])
    assert [f["id"] for f in page["items"] + rest][:TEAMS] == [f["id"] for f in oldest]
    assert [f["namespace"] for f in rest][-1] == f"acme/team{TEAMS}"

    assert [f["namespace"] for f in walk(api, owner, namespace="acme/team3")] == ["acme/team3"]
    assert [f["namespace"] for f in walk(api, owner, writer="bot5")] == ["acme/team5"]
    assert walk(api, owner, writer="nobody") == []
    rule = oldest[0]["rule"]
    assert listed(api, owner, rule=rule)["count"] == TEAMS + 1
    assert listed(api, owner, rule="no_such_rule")["count"] == 0
    middle = datetime.fromisoformat(oldest[3]["opened_at"])
    assert [f["id"] for f in walk(api, owner, until=middle.isoformat())] == [f["id"] for f in oldest[:3]]
    assert listed(api, owner, since=middle.isoformat())["count"] == TEAMS + 1 - 3
    assert listed(api, owner, since=datetime(2999, 1, 1, tzinfo=UTC).isoformat())["count"] == 0


def test_a_reviewer_below_the_root_sees_only_its_subtree_and_cannot_widen_it(api: Api) -> None:
    for team in range(3):
        open_finding(api.runtime, team)
    api.settle()
    lead = api.key("acme/team1", "lead", "admin")
    assert [f["namespace"] for f in walk(api, lead)] == ["acme/team1"]
    wider = api.call(lead, ROUTE, method="GET", params={"namespace": "acme"})
    assert wider.status_code == 403, wider.text
    assert wider.json()["error"] == "forbidden"
    sibling = api.call(lead, ROUTE, method="GET", params={"namespace": "acme/team2"})
    assert sibling.status_code == 403


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"status": "maybe"}, "status"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"cursor": "1~" + "x" * 100}, "cursor"),
        ({"since": "yesterday"}, "since"),
        ({"namespace": "acme/../etc"}, "namespace"),
        ({"writer": ""}, "writer"),
    ],
)
def test_bad_list_parameters_are_a_400_naming_the_parameter(
    api: Api, params: dict[str, str], field: str
) -> None:
    owner = api.key("acme", "olga", "owner")
    answer = api.call(owner, ROUTE, method="GET", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_request"
    assert field in answer.json()["detail"] or field == "cursor", answer.json()


@pytest.mark.parametrize(
    "route", ["/v1/admin/disputes", "/v1/admin/decisions", "/v1/admin/proposals", "/v1/admin/keys"]
)
def test_every_review_list_answers_a_counted_page(api: Api, route: str) -> None:
    owner = api.key("acme", "olga", "owner")
    for n in range(2):
        api.key("acme/eng", f"bot{n}", "agent")
    api.settle()
    answer = api.call(owner, route, method="GET", params={"limit": 1, "order": "newest"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert {"items", "cursor", "count"} <= set(body)
    if route.endswith("keys"):  # two keys at least, one a page: a cursor to the next
        assert len(body["items"]) == 1
        assert body["count"] >= 2
        assert body["cursor"] is not None
    assert api.call(owner, route, method="GET", params={"limit": 501}).status_code == 400


def test_a_queue_page_shows_the_statements_its_items_name_as_the_reviewer_may_see_them(api: Api) -> None:
    for team in range(2):
        open_finding(api.runtime, team)
    api.settle()
    owner = api.key("acme", "olga", "owner")
    page = listed(api, owner, limit=1)
    (finding,) = page["items"]
    shown = page["statements"]
    assert set(shown) == {finding["memory_a"], finding["memory_b"]}
    assert [shown[finding[m]]["content"] for m in ("memory_a", "memory_b")] == list(TEAM_CONTRADICTION)
    assert {s["actor"] for s in shown.values()} == {"bot0"}
    assert all(s["trust_tier"] and s["provenance"][0]["source"] == "conversation" for s in shown.values())
    # a reviewer of a sibling subtree never sees another subtree's statements
    lead = api.key("acme/team1", "lead", "admin")
    mine = listed(api, lead)
    assert {s["namespace"] for s in mine["statements"].values()} == {"acme/team1"}


def test_a_statement_that_contradicts_several_is_one_group_listed_whole(api: Api) -> None:
    """Four values of one limit: the last contradicts the three before it, one group."""
    rt = api.runtime
    rt.memory.band = None  # the autopilot's passes find every pair here
    who = Identity(namespace="acme/eng", actor="importer", role="agent")
    claim = ProvenanceClaim(source="conversation")
    for limit in (10, 20, 30, 50):
        result = rt.memory.write(
            who, WriteMemory(content=f"The upload limit for attachments is {limit} MB", provenance=claim)
        )
        assert result.id is not None
        rt.autopilot.judge_memory(result.id, result.position, HOLDER)
    api.settle()
    owner = api.key("acme", "olga", "owner")
    every_finding = walk(api, owner)
    last = result.id
    group = walk(api, owner, group=str(last))
    assert len(group) == 3
    assert {f["group_id"] for f in group} == {str(last)}
    assert {f["memory_b"] for f in group} == {str(last)}
    assert len(every_finding) > len(group)
    refused = api.call(owner, "/v1/admin/decisions", method="GET", params={"group": str(last)})
    assert refused.status_code == 400  # decisions have no groups: an unknown parameter


@pytest.mark.parametrize(
    "raw_query",
    [
        "writer=a%00b",
        "rule=%ED%A0%80",  # a lone surrogate, UTF-8 encoded
        "namespace=acme%E2%80%8B",  # a zero-width space
        "since=0000-01-01",
        "until=10000-01-01T00:00:00Z",
        "group=not-a-uuid",
        "cursor=1~%00",
    ],
)
def test_poisoned_list_parameters_are_refused_and_the_read_models_keep_running(
    api: Api, raw_query: str
) -> None:
    owner = api.key("acme", "olga", "owner")
    answer = api.client.get(f"{ROUTE}?{raw_query}", headers={"Authorization": f"Bearer {owner}"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_request"
    assert listed(api, owner)["count"] == 0
    assert api.client.get("/readyz").status_code == 200
