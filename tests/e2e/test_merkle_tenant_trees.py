"""With a chain per tenant, a Merkle tree per tenant as well: a tenant's auditor proves its own
records against its own tree and checkpoints, never another tenant's; the tenant trees rebuild
identically from the ledger."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden_client.proofs import Checkpoint, VerifierKey, verify_consistency, verify_inclusion
from tests.e2e.api_helpers import Api
from tests.merkle_reference import naive_root, row_leaf


@pytest.fixture
def tenant_api(settings: Settings) -> Iterator[Api]:
    chained = msgspec.structs.replace(settings, ledger_chains="tenant")
    with Runtime(chained) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


def _tenant_leaves(api: Api, tenant: str) -> list[tuple[int, bytes]]:
    """(global position, leaf) of the tenant's events, in tenant order."""
    with api.runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state FROM memwarden.events"
            " WHERE tenant = %s ORDER BY tenant_position",
            (tenant,),
        ).fetchall()
    return [(r["notification_id"], row_leaf(r)) for r in rows]


def test_each_tenant_proves_against_its_own_tree_only(tenant_api: Api) -> None:
    api = tenant_api
    for tenant in ("acme", "globex"):
        agent = api.key(f"{tenant}/eng", "bot", "agent")
        for i in range(6):
            assert (
                api.mem(agent, "write", {"content": f"{tenant} fact number {i} about rotas"}).status_code
                == 200
            )
    auditor = api.key("acme", "audrey", "auditor")
    api.settle()
    leaves = _tenant_leaves(api, "acme")
    positions, hashes = [p for p, _ in leaves], [h for _, h in leaves]
    made = api.call(auditor, "/v1/compliance/ledger/checkpoint")
    assert made.status_code == 200, made.text
    log_key = VerifierKey.parse(api.runtime.ledger.vkey_of("acme"))
    checkpoint = Checkpoint.verify(made.json()["note"], log_key)
    assert checkpoint.origin.endswith("/acme")
    assert checkpoint.root == naive_root(hashes[: checkpoint.size])

    size = checkpoint.size
    for index in (0, size // 2, size - 1):
        answer = api.call(
            auditor,
            "/v1/compliance/proofs/inclusion",
            method="GET",
            params={"position": positions[index], "size": size},
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["leaf_index"] == index
        verify_inclusion(
            index, size, hashes[index], [base64.b64decode(p) for p in body["proof"]], checkpoint.root
        )
    proof = api.call(
        auditor, "/v1/compliance/proofs/consistency", method="GET", params={"from": 3, "to": size}
    ).json()
    verify_consistency(
        3, size, naive_root(hashes[:3]), checkpoint.root, [base64.b64decode(p) for p in proof["proof"]]
    )

    globex_position = _tenant_leaves(api, "globex")[0][0]
    other = api.call(
        auditor,
        "/v1/compliance/proofs/inclusion",
        method="GET",
        params={"position": globex_position, "size": size},
    )
    assert other.status_code == 404
    listed = api.call(auditor, "/v1/compliance/checkpoints", method="GET").json()
    items = listed["items"]
    assert all(Checkpoint.verify(i["note"], log_key).origin.endswith("/acme") for i in items if i.get("note"))

    before = api.runtime.reads.tree.root(size, "acme")
    report = Rebuilder(api.runtime.reads.runner).rebuild("merkle", verify=True)
    assert report.differences == []
    assert api.runtime.reads.tree.root(size, "acme") == before
