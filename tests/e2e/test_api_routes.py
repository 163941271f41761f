"""Every route of issue 3 over HTTP: answers, error codes, and their audit records."""

from __future__ import annotations

import time

from tests.e2e.api_helpers import Api
from tests.processes import METRICS_AUTH

FACT = "The deploy service runs on Kubernetes in eu-west-1"


def test_write_read_history_verify_and_provenance(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    other = api.key("acme/eng", "bot2", "agent")
    member = api.key("acme/eng", "mia", "member")
    written = api.mem(agent, "write", {"content": FACT, "tags": ["infra"]})
    assert written.status_code == 200
    body = written.json()
    assert set(body) == {
        "outcome",
        "id",
        "supersedes",
        "dispute_id",
        "position",
        "classification",
        "rejected",
        "extracted",
        "verbatim_reason",
        "facts",
        "provenance_capped",
        "findings",
        "decisions",
    }
    assert body["outcome"] == "stored"
    assert (body["findings"], body["decisions"]) == ([], [])
    assert (body["extracted"], body["verbatim_reason"], body["facts"]) == (False, "no_extractor", [])
    read = api.mem(agent, "read", {"id": body["id"]}).json()  # read-your-writes: no sleep
    assert read["content"] == FACT
    assert read["namespace"] == "acme/eng"
    assert api.mem(agent, "history", {"id": body["id"]}).json()["versions"][0]["id"] == body["id"]
    own = api.mem(agent, "verify", {"id": body["id"], "supports": True})
    assert own.status_code == 403
    assert own.json()["error"] == "forbidden"
    verified = api.mem(other, "verify", {"id": body["id"], "supports": True, "note": "checked"})
    assert verified.status_code == 200
    assert verified.json()["trust_tier"] == "verified"
    manual = api.mem(
        agent, "write", {"content": "Dana manages the platform team", "provenance": {"source": "manual"}}
    )
    assert manual.status_code == 400
    assert manual.json()["error"] == "provenance_not_allowed"
    ok = api.mem(
        member, "write", {"content": "Dana manages the platform team", "provenance": {"source": "manual"}}
    )
    assert ok.json()["outcome"] == "stored"
    secret = api.mem(agent, "write", {"content": "the prod password is hunter2-Xy9#kkq AKIAIOSFODNN7EXAMPLE"})
    assert secret.json()["outcome"] == "rejected"


def test_policy_directives_ack_and_forbid_secrets(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    agent = api.key("acme/eng", "bot", "agent")
    put = api.call(
        admin,
        "/v1/admin/policies/acme",
        {
            "directives": [{"id": "no-pii", "text": "Never store customer PII"}],
            "conflict_review": "all",
        },
        method="PUT",
    )
    assert put.status_code == 200, put.text
    assert put.json()["version"] == 1
    eng = api.call(
        admin,
        "/v1/admin/policies/acme/eng",
        {"forbid_secrets": False, "conflict_review": "auto"},
        method="PUT",
    )
    assert eng.json()["effective"]["conflict_review"] == "auto"  # nearest wins
    policy = api.mem(agent, "policy").json()
    assert policy["forbid_secrets"] is False
    assert policy["directives"] == [
        {"id": "no-pii", "text": "Never store customer PII", "namespace": "acme", "acknowledged": False}
    ]
    assert api.mem(agent, "policy_ack", {"directive_id": "nope"}).status_code == 404
    assert api.mem(agent, "policy_ack", {"directive_id": "no-pii"}).json() == {"acknowledged": True}
    assert api.mem(agent, "policy").json()["directives"][0]["acknowledged"] is True
    secret = api.mem(agent, "write", {"content": "deploy key AKIAIOSFODNN7EXAMPLE for the staging bucket"})
    assert secret.json()["outcome"] != "rejected"  # the namespace's policy allows secrets
    stale = api.call(
        admin, "/v1/admin/policies/acme", {"suspended": False}, method="PUT", headers={"If-Match": "0"}
    )
    assert stale.status_code == 409
    assert stale.json()["error"] == "version_conflict"
    assert (
        api.call(admin, "/v1/admin/policies/acme", {"expected_version": 1}, method="PUT").status_code == 200
    )
    eng_admin = api.key("acme/eng", "e", "admin")
    assert api.call(eng_admin, "/v1/admin/policies/acme", method="GET").json()["error"] == "outside_subtree"
    assert (
        api.call(eng_admin, "/v1/admin/policies/acme/engineering", {}, method="PUT").json()["error"]
        == "outside_subtree"
    )
    assert api.call(eng_admin, "/v1/admin/policies/acme/eng/platform", method="GET").status_code == 200
    assert api.call(agent, "/v1/admin/policies/acme/eng", method="GET").status_code == 403
    bad = api.call(admin, "/v1/admin/policies/acme", {"rate_limit_per_minute": 0}, method="PUT")
    assert bad.status_code == 400


def test_pin_unpin_and_stats(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    memory_id = api.mem(agent, "write", {"content": FACT}).json()["id"]
    assert api.mem(agent, "pin", {"id": memory_id}).json() == {"pinned": True}
    assert api.mem(agent, "stats").json()["pinned"] == 1
    assert api.mem(agent, "unpin", {"id": memory_id}).json() == {"pinned": False}
    assert api.mem(agent, "stats").json()["pinned"] == 0
    assert api.mem(agent, "pin", {"id": "00000000-0000-4000-8000-000000000000"}).status_code == 404


def test_disputes_listed_and_resolved_by_reviewers(api: Api) -> None:
    member = api.key("acme/eng", "mia", "member")
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme", "boss", "admin")
    first = {
        "content": "Dana lives in Oslo",
        "subject": "dana",
        "attribute": "city",
        "value": "Oslo",
        "provenance": {"source": "manual"},
    }
    api.mem(member, "write", first)
    contra = api.mem(
        agent,
        "write",
        {"content": "Dana lives in Bergen", "subject": "dana", "attribute": "city", "value": "Bergen"},
    ).json()
    assert contra["outcome"] == "disputed"
    assert api.mem(agent, "read", {"id": contra["id"]}).status_code == 404  # quarantined
    api.settle()
    listed = api.call(admin, "/v1/admin/disputes", method="GET").json()["items"]
    assert [d["id"] for d in listed] == [contra["dispute_id"]]
    assert api.call(agent, "/v1/admin/disputes", method="GET").status_code == 403
    assert api.call(admin, "/v1/admin/disputes?status=bogus", method="GET").status_code == 400
    path = f"/v1/admin/disputes/{contra['dispute_id']}/resolve"
    assert api.call(agent, path, {"decision": "uphold_new"}).status_code == 403
    resolved = api.call(admin, path, {"decision": "uphold_new"})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["status"] == "resolved"
    assert api.call(admin, path, {"decision": "keep_old"}).status_code == 409
    missing = api.call(
        admin, "/v1/admin/disputes/00000000-0000-4000-8000-000000000000/resolve", {"decision": "keep_old"}
    )
    assert missing.status_code == 404


def test_async_write_ticket(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    other = api.key("acme/eng", "bot2", "agent")
    accepted = api.mem(agent, "write", {"content": FACT, "async": True})
    assert accepted.status_code == 202
    ticket = accepted.json()["ticket"]
    deadline = time.monotonic() + 10
    status = api.mem(agent, "write_status", {"ticket": ticket}).json()
    while status["state"] in {"pending", "running"} and time.monotonic() < deadline:
        time.sleep(0.05)
        status = api.mem(agent, "write_status", {"ticket": ticket}).json()
    assert status["state"] == "done"
    assert status["result"]["outcome"] == "stored"
    assert api.mem(agent, "read", {"id": status["result"]["id"]}).status_code == 200
    assert api.mem(other, "write_status", {"ticket": ticket}).status_code == 404  # not its ticket
    records = api.audit_records()
    writes = [r for r in records if r.op == "write"]
    assert len(writes) == 1  # the accepted request is audited once, when it is queued
    assert writes[0].detail == f"queued as ticket {ticket}"
    (ran,) = [r for r in records if r.op == "write_ticket"]  # and the write, when it runs
    assert ran.outcome == "ok"
    assert str(status["result"]["id"]) in [str(s) for s in ran.subject_ids]


def test_compliance_routes(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    auditor = api.key("acme", "audrey", "auditor")
    for n in range(5):
        api.mem(agent, "write", {"content": f"Service {n} is deployed by pipeline {n * 7}"})
    api.mem(agent, "read", {"id": "00000000-0000-4000-8000-000000000000"})
    assert api.call(agent, "/v1/compliance/audit", method="GET").status_code == 403
    page = api.call(auditor, "/v1/compliance/audit?op=write&limit=3", method="GET").json()
    assert len(page["items"]) == 3
    assert page["cursor"] is not None
    rest = api.call(
        auditor, f"/v1/compliance/audit?op=write&limit=3&cursor={page['cursor']}", method="GET"
    ).json()
    assert len(rest["items"]) == 2
    positions = [r["position"] for r in page["items"] + rest["items"]]
    assert positions == sorted(positions)
    misses = api.call(auditor, "/v1/compliance/audit?outcome=miss&actor=bot", method="GET").json()["items"]
    assert [r["op"] for r in misses] == ["read"]
    future = api.call(auditor, "/v1/compliance/audit?since=2999-01-01T00:00:00Z", method="GET").json()
    assert future["items"] == []
    checkpoint = api.call(auditor, "/v1/compliance/ledger/checkpoint")
    assert checkpoint.status_code == 200
    verified = api.call(auditor, "/v1/compliance/ledger/verify", {"checkpoint": checkpoint.json()}).json()
    assert verified["ok"] is True
    assert verified["head"]["position"] >= checkpoint.json()["position"]
    forged = {**checkpoint.json(), "position": checkpoint.json()["position"] - 1}
    assert api.call(auditor, "/v1/compliance/ledger/verify", {"checkpoint": forged}).status_code == 400
    plain = api.call(auditor, "/v1/compliance/ledger/verify")
    assert plain.json()["ok"] is True


def test_health_ready_metrics_and_openapi(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    api.mem(agent, "stats")
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert set(ready.json()["projections"]) >= {"memory_objects", "audit", "keys"}
    text = api.client.get("/metrics", headers=METRICS_AUTH).text
    assert 'memwarden_http_requests_total{method="POST",route="stats",status="200"}' in text
    assert "memwarden_ledger_head_position" in text
    schema = api.client.get("/schema/openapi.json").json()
    assert "/v1/mem/write" in schema["paths"]
    assert "/v1/admin/keys" in schema["paths"]


def test_read_as_of_and_valid_at(api: Api) -> None:
    """read with as_of shows the memory as the system knew it then; valid_at filters to
    what held in the world at that time; before it was written it is missing (404)."""
    agent = api.key("acme/eng", "bot", "agent")
    member = api.key("acme/eng", "mia", "member")
    slot = {"subject": "dana", "attribute": "city"}
    old = api.mem(
        agent,
        "write",
        {"content": "Dana lives in Lyon", **slot, "value": "Lyon", "event_time": "2026-01-01T00:00:00Z"},
    ).json()
    api.settle()
    between = api.runtime.core.memory.clock().isoformat()
    time.sleep(0.01)
    new = api.mem(
        member,
        "write",
        {
            "content": "Dana lives in Lisbon",
            **slot,
            "value": "Lisbon",
            "provenance": {"source": "manual"},
            "event_time": "2026-01-01T00:00:00Z",
        },
    ).json()
    assert new["outcome"] == "superseded"  # a correction: Lyon is retired in system time
    api.settle()
    then = api.mem(agent, "read", {"id": old["id"], "as_of": between}).json()
    assert then["status"] == "active"
    assert then["retired_at"] is None
    assert then["content"] == "Dana lives in Lyon"
    now = api.mem(agent, "read", {"id": old["id"]}).json()
    assert now["status"] == "retired"
    missing = api.mem(agent, "read", {"id": new["id"], "as_of": between})
    assert missing.status_code == 404
    assert api.mem(agent, "read", {"id": new["id"], "valid_at": "2025-06-01T00:00:00Z"}).status_code == 404
    assert (
        api.mem(agent, "read", {"id": new["id"], "valid_at": "2026-06-01T00:00:00Z"}).json()["id"]
        == new["id"]
    )
    naive = api.mem(agent, "read", {"id": old["id"], "as_of": "2026-01-01T00:00:00"})
    assert naive.status_code == 400
    outsider = api.key("acme/sales", "eve", "agent")
    assert api.mem(outsider, "read", {"id": old["id"], "as_of": between}).status_code == 404


def test_an_audit_walk_reads_one_snapshot_and_ends(api: Api) -> None:
    """Every page read is itself audited: a walk of pages of one still ends, at the head its
    first page saw, and a cursor that is not ours is a 400."""
    agent = api.key("acme/eng", "bot", "agent")
    auditor = api.key("acme", "audrey", "auditor")
    for n in range(3):
        api.mem(agent, "write", {"content": f"Queue {n} drains every {n + 2} minutes"})
    head = api.runtime.ledger.head_position()
    seen: list[int] = []
    cursor = ""
    for _ in range(100):
        page = api.call(auditor, f"/v1/compliance/audit?limit=1{cursor}", method="GET").json()
        seen += [r["position"] for r in page["items"]]
        if page["cursor"] is None:
            break
        cursor = f"&cursor={page['cursor']}"
    else:
        raise AssertionError("the walk never ended: its own audit records kept extending it")
    assert seen == sorted(set(seen))
    assert seen[-1] <= head  # nothing the walk itself appended
    assert len(seen) >= 5  # three writes, the keys it issued
    after = api.call(auditor, "/v1/compliance/audit?limit=500", method="GET").json()["items"]
    assert [r["op"] for r in after if r["position"] > head].count("compliance.audit") >= len(seen)
    for bad in ("x", "1:y", "-1", "1:2:3", "²", "1:²", "9" * 19):
        response = api.call(auditor, f"/v1/compliance/audit?cursor={bad}", method="GET")
        assert response.status_code == 400, bad
        assert response.json()["error"] == "invalid_request"
