"""search, assemble and fault over HTTP: the contract's shapes, errors and audit."""

from __future__ import annotations

import base64

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from memwarden.domain.model.capsules import Block, Receipt, blocks_root, receipt_message
from tests.e2e.api_helpers import Api


def test_search_over_http(api: Api) -> None:
    key = api.key("acme/eng", "bot", "agent")
    written = api.mem(key, "write", {"content": "The on-call phone is in the drawer of desk 14."}).json()
    api.mem(key, "write", {"content": "Visitors sign in at the front desk."})
    response = api.mem(key, "search", {"query": "where is the on-call phone", "k": 1})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["driver"] == "hybrid"
    assert body["degraded"] is False
    [hit] = body["results"]
    assert hit["id"] == written["id"]
    assert set(hit) == {
        "id",
        "namespace",
        "content",
        "score",
        "type",
        "status",
        "trust_tier",
        "recorded_at",
        "valid_from",
        "valid_to",
        "provenance",
    }
    audit = [r for r in api.audit_records() if r.op == "search"]
    assert audit[-1].outcome == "ok"
    assert "driver=hybrid" in audit[-1].detail


def test_the_policy_picks_the_driver(api: Api) -> None:
    admin = api.key("acme", "root", "admin")
    put = api.call(admin, "/v1/admin/policies/acme", {"driver": "lexical"}, method="PUT")
    assert put.status_code == 200, put.text
    key = api.key("acme/eng", "bot", "agent")
    api.mem(key, "write", {"content": "Badges are renewed every spring."})
    assert api.mem(key, "search", {"query": "badges renewed"}).json()["driver"] == "lexical"


def test_bad_search_bodies_are_400_and_audited(api: Api) -> None:
    key = api.key("acme/eng", "bot", "agent")
    bodies = (
        {},
        {"query": ""},
        {"query": "x", "k": 0},
        {"query": "x", "namespace": "acme"},
        {"query": "x", "as_of": "2026-01-01T00:00:00"},
        {"query": "x", "kk": 3},
    )
    before = len(api.audit_records())
    codes = []
    for body in bodies:
        response = api.mem(key, "search", body)
        assert response.status_code == 400, (body, response.text)
        codes.append(response.json()["error"])
    assert codes[3] == "identity_in_body"
    assert set(codes) == {"invalid_request", "identity_in_body"}
    records = api.audit_records()[before:]
    assert len(records) == len(bodies)  # one audit record per refused request, nothing else
    assert all(r.op == "search" and r.outcome == "denied" for r in records), records
    assert all(r.namespace == "acme/eng" and r.actor == "bot" for r in records)
    assert [r.detail.split(":")[0] for r in records] == codes


def test_assemble_returns_a_capsule_whose_receipt_verifies(api: Api) -> None:
    key = api.key("acme/eng", "bot", "agent")
    api.mem(key, "write", {"content": "Releases are cut from the main branch on Mondays."})
    response = api.mem(key, "assemble", {"budget_tokens": 100, "task_hint": "how are releases cut?"})
    assert response.status_code == 200, response.text
    capsule = response.json()
    assert capsule["blocks"]
    assert capsule["admission"]
    blocks = [msgspec.convert(b, Block) for b in capsule["blocks"]]
    receipt = msgspec.convert(capsule["receipt"], Receipt)
    assert blocks_root(blocks) == receipt.merkle_root  # re-derived by the client
    public = api.runtime.ledger.checkpoints.public_keys()[receipt.key_id]
    Ed25519PublicKey.from_public_bytes(public).verify(
        base64.b64decode(receipt.signature), receipt_message(receipt)
    )
    assert api.mem(key, "assemble", {"budget_tokens": 0}).status_code == 400
    assert api.mem(key, "assemble", {}).status_code == 400


def test_fault_over_http_and_auditor_may_call_it(api: Api) -> None:
    key = api.key("acme/eng", "bot", "agent")
    api.mem(key, "write", {"content": "The wifi password rotates monthly; ask IT for it."})
    api.mem(key, "write", {"content": "The staging cluster is rebuilt every Sunday."})
    hit = api.mem(key, "fault", {"question": "When is the staging cluster rebuilt?"})
    assert hit.status_code == 200, hit.text
    body = hit.json()
    assert body["hit"] is True
    assert body["source"] == "L2"
    assert body["blocks"][0]["content"] == "The staging cluster is rebuilt every Sunday."
    assert body["latency_ms"] > 0
    auditor = api.key("acme/eng", "audrey", "auditor")
    api.settle()
    miss = api.mem(auditor, "fault", {"question": "Who painted the ceiling of the chapel?"})
    assert miss.status_code == 200, miss.text
    assert miss.json()["hit"] is False
    assert miss.json()["source"] is None
    outcomes = [(r.op, r.outcome) for r in api.audit_records() if r.op == "fault"]
    assert outcomes == [("fault", "ok"), ("fault", "miss")]
