"""`POST /v1/mem/write_batch` over the real app: one result per item in order, each decided
as if written after the item before it, all in one append with one audit record; a bad
item is rejected alone, a malformed batch is a 400 for all of it and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from tests.e2e.api_helpers import Api

NS = "acme/eng"
AWS_KEY = "AKIAABCDEFGHIJKLMNOP"


@pytest.fixture(autouse=True)
def _hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """Meaning is not the point here; speed is (set before the ``api`` fixture opens)."""
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")


def slot(subject: str, value: str, source: str) -> dict[str, Any]:
    return {
        "content": f"{subject} lives in {value}",
        "subject": subject,
        "attribute": "city",
        "value": value,
        "provenance": {"source": source},
    }


ITEMS: list[dict[str, Any]] = [
    {"content": "The platform team deploys on Fridays."},  # 0 stored
    slot("dana", "Berlin", "conversation"),  # 1 stored, then superseded by 2
    slot("dana", "Paris", "document"),  # 2 superseded (higher rank, same slot)
    slot("ravi", "Oslo", "document"),  # 3 stored
    slot("ravi", "Rome", "conversation"),  # 4 disputed (lower rank than 3)
    {"content": "the platform team deploys on Fridays"},  # 5 deduplicated against 0
    {"content": "NUL \u0000 inside"},  # 6 rejected: unstorable
    {"content": "   "},  # 7 rejected: empty
    {"content": "A naive time", "event_time": "2026-03-01T09:00:00"},  # 8 rejected: no zone
    {"content": f"The deploy key is {AWS_KEY}"},  # 9 rejected: secret
    {"content": "I say so", "provenance": {"source": "manual"}},  # 10 an agent may not
    {"content": "Billing runs nightly at two.", "tags": ["ops"]},  # 11 stored
]


def test_items_are_decided_in_order_in_one_append(api: Api) -> None:
    key = api.key(NS, "bot", "agent", "document")
    before = api.runtime.ledger.head_position()
    response = api.mem(key, "write_batch", {"items": ITEMS})
    assert response.status_code == 200, response.text
    results = response.json()["results"]

    assert [r["outcome"] for r in results] == [
        "stored",
        "stored",
        "superseded",
        "stored",
        "disputed",
        "deduplicated",
        "rejected",
        "rejected",
        "rejected",
        "rejected",
        "rejected",
        "stored",
    ]
    assert results[2]["supersedes"] == [results[1]["id"]]
    assert results[4]["dispute_id"] is not None
    assert results[5]["id"] == results[0]["id"]
    reasons = [r["rejected"][0]["reason"] for r in results[6:11]]
    assert reasons == ["unstorable", "empty", "invalid_request", "secret_forbidden", "provenance_not_allowed"]
    assert "items[6].content" in results[6]["rejected"][0]["detail"]
    assert "timezone" in results[8]["rejected"][0]["detail"]
    assert AWS_KEY not in response.text
    assert len({r["position"] for r in results}) == 1

    appended = api.runtime.ledger.read(before, 10_000)
    assert len({r.position for r in appended}) == len(appended)
    written = [r.event for r in appended if isinstance(r.event, MemoryWritten)]
    assert len(written) == 6  # 0, 1, 2, 3, 4 (disputed) and 11
    assert all(w.embedding is not None for w in written)  # embedded before the append
    (audit,) = [r.event for r in appended if isinstance(r.event, AuditRecorded)]
    assert (audit.op, audit.outcome) == ("write_batch", "ok")
    assert {str(s) for s in audit.subject_ids} == {r["id"] for r in results if r["id"]}
    assert len(audit.subject_ids) == 6
    assert "#6 unstorable" in audit.detail
    assert "#9 secret_forbidden" in audit.detail
    assert AWS_KEY not in audit.detail

    first = api.mem(key, "read", {"id": results[1]["id"]}).json()
    assert first["status"] == "retired"
    assert first["superseded_by"] == [results[2]["id"]]
    assert api.mem(key, "read", {"id": results[4]["id"]}).status_code == 404  # quarantined
    stats = api.mem(key, "stats").json()
    assert (stats["current"], stats["disputed"], stats["retired"]) == (4, 1, 1)


def test_a_second_batch_of_the_same_items_deduplicates(api: Api) -> None:
    key = api.key(NS, "bot", "agent", "document")
    items = [{"content": f"Service {n} is owned by team {n % 3}."} for n in range(20)]
    first = api.mem(key, "write_batch", {"items": items}).json()["results"]
    again = api.mem(key, "write_batch", {"items": items}).json()["results"]
    assert {r["outcome"] for r in first} == {"stored"}
    assert {r["outcome"] for r in again} == {"deduplicated"}
    assert [r["id"] for r in again] == [r["id"] for r in first]
    assert api.mem(key, "stats").json()["current"] == 20


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"items": [{"content": f"fact {n} holds"} for n in range(257)]}, "invalid_request"),
        ({"items": []}, "invalid_request"),
        ({"items": {"content": "not a list"}}, "invalid_request"),
        ({"items": ["a string, not a write"]}, "invalid_request"),
        ({"items": [{"content": "ok"}, {"content": "typo", "tagz": ["x"]}]}, "invalid_request"),
        ({"items": [{"content": "ok", "async": True}]}, "invalid_request"),
        ({"items": [{"content": "ok"}], "verbatim": True}, "invalid_request"),
        ({"items": [{"content": "ok"}, {"content": "mine", "namespace": "acme"}]}, "identity_in_body"),
    ],
)
def test_a_malformed_batch_is_refused_whole_and_audited(api: Api, body: dict[str, Any], code: str) -> None:
    key = api.key(NS, "bot", "agent", "document")
    before = api.runtime.ledger.head_position()
    response = api.mem(key, "write_batch", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == code
    appended = [r.event for r in api.runtime.ledger.read(before, 100)]
    assert not [e for e in appended if isinstance(e, MemoryWritten)]
    denials = [e for e in appended if isinstance(e, AuditRecorded)]
    assert [(a.op, a.outcome) for a in denials] == [("write_batch", "denied")]


def test_an_auditor_may_not_write_a_batch(api: Api) -> None:
    key = api.key(NS, "watcher", "auditor")
    response = api.mem(key, "write_batch", {"items": [{"content": "The cache is warm."}]})
    assert response.status_code == 403
