"""Provenance a key may claim, over HTTP: an agent key made without a cap that claims
``document`` cannot supersede a document-sourced fact (its claim is lowered to
``conversation``, the result and the audit say so); a key made with ``max_provenance`` may;
a namespace whose policy says ``refuse`` answers 400; nobody grants more than they hold."""

from __future__ import annotations

from tests.e2e.api_helpers import Api

NS = "acme/eng"
DOCUMENTED = {
    "content": "The VPN gateway is vpn1.acme.example",
    "subject": "vpn",
    "attribute": "gateway",
    "value": "vpn1.acme.example",
    "provenance": {"source": "document", "ref": "runbook-7"},
}
CLAIM = {
    "content": "The VPN gateway is vpn9.acme.example",
    "subject": "vpn",
    "attribute": "gateway",
    "value": "vpn9.acme.example",
    "provenance": {"source": "document"},
}


def test_an_agent_that_claims_a_document_it_may_not_is_capped_and_disputed(api: Api) -> None:
    ingest = api.key(NS, "ingest", "agent", "document")
    assert api.mem(ingest, "write", DOCUMENTED).json()["outcome"] == "stored"
    chatty = api.key(NS, "chatty", "agent")
    answer = api.mem(chatty, "write", CLAIM)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["outcome"] == "disputed"
    assert body["provenance_capped"] == {"claimed": "document", "applied": "conversation"}
    written = [r for r in api.audit_records() if r.op == "write" and r.actor == "chatty"]
    assert written[-1].detail.endswith("disputed (provenance document capped to conversation)")
    assert api.mem(ingest, "write", CLAIM).json()["outcome"] == "superseded"  # within its cap


def test_a_namespace_may_refuse_claims_above_the_cap(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    put = api.client.put(
        f"/v1/admin/policies/{NS}",
        json={"provenance_over_cap": "refuse"},
        headers={"Authorization": f"Bearer {admin}"},
    )
    assert put.status_code == 200, put.text
    assert put.json()["effective"]["provenance_over_cap"] == "refuse"
    refused = api.mem(api.key(NS, "chatty", "agent"), "write", CLAIM)
    assert refused.status_code == 400
    assert refused.json()["error"] == "provenance_not_allowed"


def test_keys_are_made_and_listed_with_their_cap(api: Api) -> None:
    admin = api.key("acme", "boss", "admin")
    made = api.call(
        admin,
        "/v1/admin/keys",
        {"target": NS, "actor": "fetcher", "role": "agent", "max_provenance": "live-fetch"},
    )
    assert made.status_code == 200, made.text
    manual_agent = api.call(
        admin, "/v1/admin/keys", {"target": NS, "actor": "liar", "role": "agent", "max_provenance": "manual"}
    )
    assert manual_agent.status_code == 400
    unknown = api.call(
        admin, "/v1/admin/keys", {"target": NS, "actor": "x", "role": "agent", "max_provenance": "rumour"}
    )
    assert unknown.status_code == 400
    keys = api.call(admin, "/v1/admin/keys", method="GET").json()["items"]
    items = keys["items"] if isinstance(keys, dict) else keys
    caps = {k["actor"]: k["max_provenance"] for k in items}
    assert caps["fetcher"] == "live-fetch"
    assert caps["boss"] == "manual"  # made without one: an admin's default


def test_nobody_grants_more_than_they_may_claim(api: Api) -> None:
    owner = api.key("acme", "olga", "owner")
    limited = api.call(
        owner,
        "/v1/admin/keys",
        {"target": "acme", "actor": "lim", "role": "admin", "max_provenance": "document"},
    )
    assert limited.status_code == 200, limited.text
    grant = api.call(
        limited.json()["key"],
        "/v1/admin/keys",
        {"target": NS, "actor": "m", "role": "member", "max_provenance": "manual"},
    )
    assert grant.status_code == 403, grant.text
