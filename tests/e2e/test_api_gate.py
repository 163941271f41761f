"""The gate over HTTP: identity from keys only, roles, tenant suspension, rate limits,
bad input never a 500, and exactly one audit record per syscall."""

from __future__ import annotations

import time

import pytest

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.processes import METRICS_AUTH

FACT = "The deploy service runs on Kubernetes in eu-west-1"


def test_missing_unknown_malformed_and_revoked_keys_get_401(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme", "boss", "admin")
    assert api.mem(agent, "stats").status_code == 200
    for key in (
        None,
        "mw_nope",
        "mw_" + "0" * 32 + "_" + "a" * 64,
        agent[:-1] + ("0" if agent[-1] != "0" else "1"),
    ):
        response = api.mem(key, "stats")
        assert response.status_code == 401, key
        assert response.json()["error"] == "unauthenticated"
    assert api.client.post("/v1/mem/stats", headers={"Authorization": f"Basic {agent}"}).status_code == 401
    key_id = agent.split("_")[1]
    revoked = api.call(admin, "/v1/admin/keys/revoke", {"key_id": key_id})
    assert revoked.status_code == 200, revoked.text
    assert revoked.json() == {"revoked": True}
    response = api.mem(agent, "stats")  # revoked through this process: at once
    assert response.status_code == 401
    assert response.json() == {"error": "unauthenticated", "detail": response.json()["detail"]}
    again = api.call(admin, "/v1/admin/keys/revoke", {"key_id": key_id})
    assert again.status_code == 409


def test_a_key_revoked_elsewhere_stops_within_the_cache_ttl(api: Api, settings: Settings) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    assert api.mem(agent, "stats").status_code == 200  # now cached in the API process
    with Runtime(settings, follow=False) as other:  # another process (the CLI) revokes it
        key = other.core.governance.key(agent.split("_")[1])
        assert key is not None
        from memwarden.domain.model.identity import Identity  # noqa: PLC0415

        other.core.governance.revoke_key(Identity("acme", "operator@cli", "owner"), key.key_id)
    time.sleep(1.1)
    assert api.mem(agent, "stats").status_code == 401


def test_an_auditor_cannot_write_verify_pin_or_share(api: Api) -> None:
    auditor = api.key("acme/eng", "audrey", "auditor")
    for name, body in (
        ("write", {"content": FACT}),
        ("verify", {"id": "8d84b5f2-bf4b-486c-84e3-8a32a4fd1068", "supports": True}),
        ("pin", {"id": "8d84b5f2-bf4b-486c-84e3-8a32a4fd1068"}),
        ("share", {"id": "8d84b5f2-bf4b-486c-84e3-8a32a4fd1068", "with": "acme/ops"}),
    ):
        response = api.mem(auditor, name, body)
        assert response.status_code == 403, name
        assert response.json()["error"] == "forbidden"
    assert api.mem(auditor, "stats").status_code == 200
    assert api.call(auditor, "/v1/compliance/audit", method="GET").status_code == 200
    assert api.call(auditor, "/v1/admin/keys", method="GET").status_code == 403


def test_key_minting_rules(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme/eng", "boss", "admin")
    owner = api.key("acme", "olga", "owner")
    refused = api.call(agent, "/v1/admin/keys", {"target": "acme/eng", "actor": "evil", "role": "admin"})
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden"
    above = api.call(admin, "/v1/admin/keys", {"target": "acme/eng", "actor": "x", "role": "owner"})
    assert above.status_code == 403
    outside = api.call(admin, "/v1/admin/keys", {"target": "acme/sales", "actor": "x", "role": "agent"})
    assert outside.status_code == 403
    assert outside.json()["error"] == "outside_subtree"
    lookalike = api.call(
        admin, "/v1/admin/keys", {"target": "acme/engineering", "actor": "x", "role": "agent"}
    )
    assert lookalike.json()["error"] == "outside_subtree"
    bad_role = api.call(admin, "/v1/admin/keys", {"target": "acme/eng", "actor": "x", "role": "root"})
    assert bad_role.status_code == 400
    made = api.call(admin, "/v1/admin/keys", {"target": "acme/eng/platform", "actor": "ci", "role": "member"})
    assert made.status_code == 200
    new_key = made.json()["key"]
    assert new_key.startswith("mw_" + made.json()["key_id"] + "_")
    assert api.mem(new_key, "stats").json()["namespace"] == "acme/eng/platform"
    assert (
        api.call(owner, "/v1/admin/keys", {"target": "acme", "actor": "o2", "role": "owner"}).status_code
        == 200
    )
    listed = api.call(admin, "/v1/admin/keys", method="GET").json()["items"]
    assert {k["namespace"] for k in listed} == {"acme/eng", "acme/eng/platform"}
    assert all("key_hash" not in k and "key" not in k for k in listed)
    # an admin cannot revoke an owner's key, nor a key outside its subtree
    owner_id = owner.split("_")[1]
    assert api.call(admin, "/v1/admin/keys/revoke", {"key_id": owner_id}).status_code == 404
    top_admin = api.key("acme", "a2", "admin")
    assert api.call(top_admin, "/v1/admin/keys/revoke", {"key_id": owner_id}).status_code == 403


def test_identity_in_body_or_query_is_refused_and_audited(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    before = len(api.audit_records())
    for field in ("namespace", "actor", "role", "tenant", "agent_id"):
        response = api.mem(agent, "write", {"content": FACT, field: "acme"})
        assert response.status_code == 400, field
        assert response.json()["error"] == "identity_in_body"
    nested = api.mem(agent, "write", {"content": FACT, "provenance": {"source": "document", "actor": "ceo"}})
    assert nested.json()["error"] == "identity_in_body"
    query = api.client.post(
        "/v1/mem/stats?namespace=acme", json={}, headers={"Authorization": f"Bearer {agent}"}
    )
    assert query.status_code == 400
    assert query.json()["error"] == "identity_in_body"
    records = api.audit_records()[before:]
    assert len(records) == 7
    assert all(r.outcome == "denied" and r.detail.startswith("identity_in_body") for r in records)
    assert all(r.namespace == "acme/eng" and r.actor == "bot" for r in records)


def test_unknown_fields_wrong_types_malformed_json_huge_bodies_never_500(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme", "boss", "admin")
    auth = {"Authorization": f"Bearer {agent}"}
    admin_auth = {"Authorization": f"Bearer {admin}"}
    routes = [
        ("POST", "/v1/mem/write", auth),
        ("POST", "/v1/mem/write_status", auth),
        ("POST", "/v1/mem/read", auth),
        ("POST", "/v1/mem/history", auth),
        ("POST", "/v1/mem/verify", auth),
        ("POST", "/v1/mem/stats", auth),
        ("POST", "/v1/mem/policy", auth),
        ("POST", "/v1/mem/policy_ack", auth),
        ("POST", "/v1/mem/pin", auth),
        ("POST", "/v1/mem/unpin", auth),
        ("POST", "/v1/mem/share", admin_auth),
        ("POST", "/v1/admin/keys", admin_auth),
        ("POST", "/v1/admin/keys/revoke", admin_auth),
        ("PUT", "/v1/admin/policies/acme/eng", admin_auth),
        ("POST", "/v1/admin/disputes/8d84b5f2-bf4b-486c-84e3-8a32a4fd1068/resolve", admin_auth),
        ("POST", "/v1/compliance/ledger/verify", admin_auth),
        ("POST", "/v1/compliance/ledger/checkpoint", admin_auth),
    ]
    bodies = [
        b"{not json",
        b"[1, 2]",
        b'"text"',
        b"null",
        b'{"typo_field": 1}',
        b'{"content": 5, "id": [], "supports": "yes"}',
        b'{"id": "not-a-uuid"}',
        b"\xff\xfe\x00",
        b'{"content": "' + b"x" * 2_000_000 + b'"}',
    ]
    before = len(api.audit_records())
    sent = 0
    for method, path, headers in routes:
        for body in bodies:
            response = api.client.request(
                method, path, content=body, headers={**headers, "Content-Type": "application/json"}
            )
            sent += 1
            assert response.status_code < 500, (path, body[:30], response.text)
            assert response.status_code in {400, 413}, (path, body[:30], response.status_code, response.text)
            assert set(response.json()) == {"error", "detail"}
    bad_query = api.client.get("/v1/compliance/audit?limit=abc", headers=admin_auth)
    assert bad_query.status_code == 400
    bad_cursor = api.client.get("/v1/compliance/audit?cursor=-1", headers=admin_auth)
    assert bad_cursor.status_code == 400
    huge = api.client.post("/v1/mem/write", content=b"{" + b" " * 3_000_000 + b"}", headers=auth)
    assert huge.status_code == 413
    assert huge.json()["error"] == "too_large"
    assert len(api.audit_records()) - before == sent + 3


def test_a_suspended_tenant_gets_403_on_every_syscall(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme", "boss", "admin")
    other = api.key("globex/eng", "bot", "agent")
    written = api.mem(agent, "write", {"content": FACT}).json()
    suspend = api.call(admin, "/v1/admin/policies/acme", {"suspended": True}, method="PUT")
    assert suspend.status_code == 200, suspend.text
    memory = {"id": written["id"]}
    calls = [
        ("write", {"content": "Another fact about the billing system"}),
        ("write_status", {"ticket": written["id"]}),
        ("read", memory),
        ("history", memory),
        ("verify", {**memory, "supports": True}),
        ("stats", {}),
        ("policy", {}),
        ("policy_ack", {"directive_id": "d1"}),
        ("pin", memory),
        ("unpin", memory),
    ]
    for name, body in calls:
        response = api.mem(agent, name, body)
        assert response.status_code == 403, name
        assert response.json()["error"] == "tenant_suspended"
    share = api.mem(admin, "share", {"id": written["id"], "with": "acme/ops"})
    assert share.json()["error"] == "tenant_suspended"
    assert (
        api.call(admin, "/v1/admin/keys", {"target": "acme/eng", "actor": "x", "role": "agent"}).status_code
        == 403
    )
    assert api.mem(other, "stats").status_code == 200  # another tenant is untouched
    lifted = api.call(admin, "/v1/admin/policies/acme", {"suspended": False}, method="PUT")
    assert lifted.status_code == 200
    assert api.mem(agent, "stats").status_code == 200


def test_rate_limit_is_a_token_bucket_per_key_with_retry_after(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    agent = api.key("acme/eng", "bot", "agent")
    agent2 = api.key("acme/eng", "bot2", "agent")
    assert (
        api.call(admin, "/v1/admin/policies/acme/eng", {"rate_limit_per_minute": 3}, method="PUT").status_code
        == 200
    )
    statuses = [api.mem(agent, "stats").status_code for _ in range(5)]
    assert statuses == [200, 200, 200, 429, 429]
    limited = api.mem(agent, "stats")
    assert limited.json()["error"] == "rate_limited"
    assert int(limited.headers["Retry-After"]) >= 1
    assert api.mem(agent2, "stats").status_code == 200  # per key


def test_mixed_workload_yields_exactly_one_audit_record_per_syscall(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    agent = api.key("acme/eng", "bot", "agent")
    auditor = api.key("acme/eng", "audrey", "auditor")
    limited = api.key("acme/limited", "slow", "agent")
    assert (
        api.call(
            admin, "/v1/admin/policies/acme/limited", {"rate_limit_per_minute": 2}, method="PUT"
        ).status_code
        == 200
    )
    before = len(api.audit_records())
    statuses: list[int] = []
    ids: list[str] = []
    for n in range(6):
        response = api.mem(agent, "write", {"content": f"Service {n} is deployed by pipeline {n * 7}"})
        statuses.append(response.status_code)
        ids.append(response.json()["id"])
    statuses += [api.mem(agent, "read", {"id": memory_id}).status_code for memory_id in ids]
    missing = "00000000-0000-4000-8000-000000000000"
    statuses += [
        api.mem(agent, "read", {"id": missing}).status_code,
        api.mem(agent, "history", {"id": missing}).status_code,
    ]
    statuses += [api.mem(auditor, "write", {"content": "auditors cannot write this"}).status_code]
    statuses += [api.mem(agent, "write", {"content": FACT, "namespace": "acme"}).status_code]
    statuses += [api.mem(agent, "write", {"content": 12}).status_code]
    statuses += [api.mem(agent, "verify", {"id": ids[0], "supports": True}).status_code]  # own write: 403
    statuses += [api.mem(limited, "stats").status_code for _ in range(4)]
    statuses += [api.mem(agent, "stats").status_code, api.mem(agent, "policy").status_code]
    statuses += [api.call(auditor, "/v1/compliance/audit", method="GET").status_code]
    assert sorted(set(statuses)) == [200, 400, 403, 404, 429]
    records = api.audit_records()[before:]
    assert len(records) == len(statuses)
    outcomes = [r.outcome for r in records]
    assert outcomes.count("miss") == 2
    assert outcomes.count("denied") == statuses.count(400) + statuses.count(403) + statuses.count(429)
    assert outcomes.count("ok") == statuses.count(200)
    assert sum(1 for r in records if r.detail.startswith("rate_limited")) == 2


def test_projection_lag_is_503_with_retry_after_and_audited(settings: Settings) -> None:
    from litestar.testing import TestClient  # noqa: PLC0415

    lagging = Settings(
        **{**{f: getattr(settings, f) for f in settings.__struct_fields__}, "read_wait_seconds": 0.2}
    )
    with Runtime(lagging, follow=False) as runtime:
        runtime.reads.runner.catch_up()
        with TestClient(app=create_app(runtime=runtime)) as client:
            helper = Api(runtime, client)
            agent = helper.key("acme/eng", "bot", "agent")
            runtime.reads.runner._applies_here = True  # pretend this process projects: nobody catches up
            try:
                written = helper.mem(agent, "write", {"content": FACT}).json()
                response = helper.mem(agent, "read", {"id": written["id"]})
            finally:
                runtime.reads.runner._applies_here = False
            assert response.status_code == 503
            assert response.json()["error"] == "projection_lag"
            assert int(response.headers["Retry-After"]) >= 1
            last = helper.audit_records()[-1]
            assert (last.op, last.outcome) == ("read", "error")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/schema/openapi.json"])
def test_public_routes_need_no_key(api: Api, path: str) -> None:
    response = api.client.get(path)
    assert response.status_code == 200


def test_metrics_need_the_operators_token_or_a_tenants_staff_key(api: Api) -> None:
    """Every tenant's activity is the operator's to see; a tenant's auditor sees its own."""
    acme, globex = api.key("acme", "audrey", "auditor"), api.key("globex", "gail", "auditor")
    api.mem(api.key("acme/eng", "bot", "agent"), "stats")
    api.mem(api.key("globex/ops", "bot", "agent"), "stats")
    assert api.client.get("/metrics").status_code == 401
    assert api.client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    agent = api.key("acme/eng", "bot2", "agent")
    assert api.client.get("/metrics", headers={"Authorization": f"Bearer {agent}"}).status_code == 401
    full = api.client.get("/metrics", headers=METRICS_AUTH)
    assert full.status_code == 200
    assert 'tenant="acme"' in full.text
    assert 'tenant="globex"' in full.text
    assert "memwarden_ledger_head_position" in full.text
    own = api.client.get("/metrics", headers={"Authorization": f"Bearer {acme}"}).text
    assert 'tenant="acme"' in own
    assert "globex" not in own
    assert "memwarden_http_requests_total{" not in own  # the process-wide series are the operator's
    assert "acme" not in api.client.get("/metrics", headers={"Authorization": f"Bearer {globex}"}).text
