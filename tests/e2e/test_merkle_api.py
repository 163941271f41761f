"""The tree over the served ledger: its roots equal a naive RFC 6962 tree over the events
table's canonical records; inclusion and consistency proofs from the compliance routes verify
with the client alone; an erased memory's leaf still proves; the tree rebuilds identically."""

from __future__ import annotations

import base64
from uuid import UUID

from memwarden.domain.ledger.chain import canonical
from memwarden.projections.rebuild import Rebuilder
from memwarden_client.proofs import leaf_hash, verify_consistency, verify_inclusion
from tests.e2e.api_helpers import Api
from tests.merkle_reference import naive_root


def _ledger_leaves(api: Api) -> list[bytes]:
    with api.runtime.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            "SELECT notification_id, originator_id, originator_version, topic, state FROM memwarden.events"
            " ORDER BY notification_id"
        ).fetchall()
    return [
        leaf_hash(
            canonical(
                r["notification_id"],
                UUID(str(r["originator_id"])),
                r["originator_version"],
                r["topic"],
                bytes(r["state"]),
            )
        )
        for r in rows
    ]


def _b64(values: list[str]) -> list[bytes]:
    return [base64.b64decode(v) for v in values]


def _write_some(api: Api, n: int) -> tuple[str, str]:
    agent = api.key("acme/eng", "bot", "agent")
    ids = [
        api.mem(agent, "write", {"content": f"Fact number {i} about the release train"}).json()["id"]
        for i in range(n)
    ]
    return agent, ids[0]


def test_proofs_from_the_api_verify_with_the_client_alone(api: Api) -> None:
    _write_some(api, 12)
    auditor = api.key("acme", "audrey", "auditor")
    api.settle()
    leaves = _ledger_leaves(api)
    size = len(leaves)
    for position in (1, size // 2, size):
        answer = api.call(
            auditor,
            "/v1/compliance/proofs/inclusion",
            method="GET",
            params={"position": position, "size": size},
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert base64.b64decode(body["leaf_hash"]) == leaves[position - 1]
        assert base64.b64decode(body["root"]) == naive_root(leaves)
        verify_inclusion(
            body["leaf_index"], size, leaves[position - 1], _b64(body["proof"]), naive_root(leaves)
        )
    first = size // 3
    answer = api.call(
        auditor, "/v1/compliance/proofs/consistency", method="GET", params={"from": first, "to": size}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    verify_consistency(first, size, naive_root(leaves[:first]), naive_root(leaves), _b64(body["proof"]))


def test_proof_requests_out_of_range_are_400_and_agents_are_refused(api: Api) -> None:
    agent, _ = _write_some(api, 2)
    auditor = api.key("acme", "audrey", "auditor")
    api.settle()
    for params in ({"position": 0, "size": 3}, {"position": 5, "size": 3}, {"position": 1, "size": 10**9}):
        answer = api.call(auditor, "/v1/compliance/proofs/inclusion", method="GET", params=params)
        assert answer.status_code == 400, (params, answer.text)
    assert (
        api.call(
            agent, "/v1/compliance/proofs/inclusion", method="GET", params={"position": 1, "size": 1}
        ).status_code
        == 403
    )


def test_an_erased_memorys_leaf_still_proves_and_the_tree_rebuilds_the_same(api: Api) -> None:
    agent, first_id = _write_some(api, 5)
    admin = api.key("acme", "boss", "admin")
    api.settle()
    with api.runtime.ledger.datastore.get_connection() as conn:
        row = conn.execute(
            "SELECT notification_id FROM memwarden.events WHERE originator_id = %s ORDER BY originator_version LIMIT 1",
            (UUID(first_id),),
        ).fetchone()
    written_at = row["notification_id"]
    forgotten = api.call(admin, "/v1/mem/forget", {"ids": [first_id], "reason": "subject asked"})
    assert forgotten.status_code == 200, forgotten.text
    api.settle()
    leaves = _ledger_leaves(api)
    proof = api.runtime.reads.tree.inclusion(written_at, len(leaves))
    verify_inclusion(written_at - 1, len(leaves), leaves[written_at - 1], proof.proof, naive_root(leaves))
    before = api.runtime.reads.tree.root(len(leaves))
    report = Rebuilder(api.runtime.reads.runner).rebuild("merkle", verify=True)
    assert report.differences == []
    assert api.runtime.reads.tree.root(len(leaves)) == before
    del agent
