"""Consolidation as a plain service on real PostgreSQL + pgvector and the offline embedder:
clusters drafted once, the extractive choice, reviewers' approve/edit/reject (audited,
within their subtree), approval into L3 and a fault answered from it."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import KnowledgePublished
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent", max_provenance="document")
REVIEWER = Identity(namespace="acme/eng", actor="rev", role="admin")
OUTSIDER = Identity(namespace="acme/sales", actor="rev2", role="admin")
NS = AGENT.namespace
FACT = "The staging cluster is rebuilt from the golden image every Sunday night"
REORDERED = "Every Sunday night the staging cluster is rebuilt from the golden image"


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def write(rt: Runtime, content: str, source: str = "conversation", **slot: str) -> tuple[UUID, int]:
    command = WriteMemory(content=content, provenance=ProvenanceClaim(source=source), **slot)  # type: ignore[arg-type]
    result = rt.memory.write(AGENT, command)
    assert result.outcome in {"stored", "superseded"}, result
    assert result.id is not None
    return result.id, result.position


def test_near_duplicates_are_proposed_once_with_the_highest_trust_member(runtime: Runtime) -> None:
    low, _ = write(runtime, FACT)
    high, _ = write(runtime, FACT + " again", source="document")
    newest, position = write(runtime, REORDERED)
    write(runtime, "Lunch is served in the atrium on Fridays")
    result = runtime.consolidation.consolidate(NS, position, "worker-1")
    assert result.clusters == 1
    assert len(result.drafted) == 1
    proposal = runtime.consolidation.proposal(result.drafted[0])
    assert proposal is not None
    assert proposal.kind == "near_duplicate"
    assert set(proposal.sources) == {low, high, newest}
    assert proposal.canonical == high  # highest trust beats newest
    assert proposal.status == "pending_review"

    head = runtime.ledger.head_position()
    again = runtime.consolidation.consolidate(NS, position, "worker-2")  # a redelivery
    assert again.drafted == ()
    assert again.clusters == 1
    assert runtime.ledger.head_position() == head + 2  # only the lease taken and released


def test_a_slot_history_is_a_cluster(runtime: Runtime) -> None:
    first, _ = write(
        runtime, "The on-call pager rotates weekly", subject="pager", attribute="rotation", value="weekly"
    )
    second, position = write(
        runtime, "The on-call pager rotates daily", subject="pager", attribute="rotation", value="daily"
    )
    result = runtime.consolidation.consolidate(NS, position, "worker-1")
    proposals = [runtime.consolidation.proposal(p) for p in result.drafted]
    assert [(p.kind, set(p.sources), p.canonical) for p in proposals if p] == [
        ("slot_history", {first, second}, second)
    ]


def drafted(rt: Runtime) -> UUID:
    write(rt, FACT)
    _, position = write(rt, REORDERED)
    result = rt.consolidation.consolidate(NS, position, "worker-1")
    assert len(result.drafted) == 1
    return result.drafted[0]


def test_an_approved_proposal_is_l3_knowledge_that_fault_answers_from(runtime: Runtime) -> None:
    proposal_id = drafted(runtime)
    with pytest.raises(NotFound):
        runtime.consolidation.approve(OUTSIDER, proposal_id)
    with pytest.raises(Forbidden):
        runtime.consolidation.approve(AGENT, proposal_id)
    approved = runtime.consolidation.approve(REVIEWER, proposal_id)
    assert approved.proposal.status == "approved"
    assert approved.proposal.document_id is not None
    published = runtime.consolidation.knowledge.versions(approved.proposal.document_id)
    assert len(published) == 1
    assert published[0].source == f"consolidation/{proposal_id}.md"
    assert published[0].namespace == NS
    assert published[0].body == REORDERED  # equal trust: the newest
    with pytest.raises(InvalidState):
        runtime.consolidation.approve(REVIEWER, proposal_id)  # immutable: approved once
    assert sum(isinstance(r.event, KnowledgePublished) for r in runtime.ledger.read(0, 10_000)) == 1

    answer = runtime.working_sets.fault(
        AGENT,
        "When is the staging cluster rebuilt from the golden image?",
        after=runtime.ledger.head_position(),
    )
    assert answer.hit
    sources = list(approved.proposal.sources)
    runtime.core.erasure.forget(REVIEWER, Forget(ids=tuple(sources), reason="consolidated"))
    gone = runtime.working_sets.fault(
        AGENT,
        "When is the staging cluster rebuilt from the golden image?",
        after=runtime.ledger.head_position(),
    )
    assert not any(REORDERED in b.content for b in gone.blocks)  # erased with its source


def test_an_edit_is_what_approval_publishes_and_a_rejection_is_final(runtime: Runtime) -> None:
    proposal_id = drafted(runtime)
    for poison in ("bad\x00text", "lone \ud800", "   "):
        with pytest.raises(InvalidRequest):
            runtime.consolidation.edit(REVIEWER, proposal_id, poison)
    edited = runtime.consolidation.edit(REVIEWER, proposal_id, "Staging is rebuilt on Sundays.")
    assert edited.content == "Staging is rebuilt on Sundays."
    approved = runtime.consolidation.approve(REVIEWER, proposal_id)
    assert approved.proposal.document_id is not None
    body = runtime.consolidation.knowledge.versions(approved.proposal.document_id)[0].body
    assert body == "Staging is rebuilt on Sundays."

    write(runtime, "Deploys freeze at noon on Fridays before the release")
    _, position = write(runtime, "On Fridays deploys freeze at noon before the release")
    second = runtime.consolidation.consolidate(NS, position, "worker-1").drafted
    assert len(second) == 1
    rejected = runtime.consolidation.reject(REVIEWER, second[0])
    assert rejected.proposal.status == "rejected"
    with pytest.raises(InvalidState):
        runtime.consolidation.approve(REVIEWER, second[0])


def test_the_proposal_routes_list_edit_reject_and_approve_within_the_subtree(settings: Settings) -> None:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        api = Api(runtime, client)
        admin, outsider, agent = (
            api.key("acme/eng", "rev", "admin"),
            api.key("acme/sales", "rev2", "admin"),
            api.key(NS, "bot", "agent"),
        )
        proposal_id = drafted(runtime)
        api.settle()
        listed = api.call(admin, "/v1/admin/proposals", method="GET")
        assert listed.status_code == 200, listed.text
        assert [p["id"] for p in listed.json()["items"]] == [str(proposal_id)]
        assert api.call(outsider, "/v1/admin/proposals", method="GET").json()["items"] == []
        assert api.mem(agent, "stats").json()["open_proposals"] == 1
        assert api.call(agent, f"/v1/admin/proposals/{proposal_id}/approve").status_code == 403

        path = f"/v1/admin/proposals/{proposal_id}"
        for body in ({"content": "a\u0000b"}, {"content": ""}, {"content": "x", "extra": 1}, {}):
            refused = api.call(admin, f"{path}/edit", body)
            assert refused.status_code == 400, (body, refused.text)
        surrogate = client.post(
            f"{path}/edit",
            content=b'{"content": "\\ud800"}',
            headers={"Authorization": f"Bearer {admin}", "Content-Type": "application/json"},
        )
        assert surrogate.status_code == 400, surrogate.text
        edited = api.call(admin, f"{path}/edit", {"content": "Staging rebuilds on Sundays."})
        assert edited.status_code == 200, edited.text
        assert edited.json()["content"] == "Staging rebuilds on Sundays."
        approved = api.call(admin, f"{path}/approve")
        assert approved.status_code == 200, approved.text
        assert approved.json()["proposal"]["status"] == "approved"
        assert approved.json()["proposal"]["document_id"] is not None
        assert api.call(admin, f"{path}/reject").status_code == 409
        assert (
            api.call(admin, "/v1/admin/proposals/00000000-0000-0000-0000-000000000000/approve").status_code
            == 404
        )
        api.settle()  # the agent reads its own writes at once; the admin's, once projected
        assert api.mem(agent, "stats").json()["open_proposals"] == 0
        ops = [(a.op, a.outcome) for a in api.audit_records() if a.op.endswith("_proposal")]
        assert ops.count(("approve_proposal", "ok")) == 1
        assert ops.count(("edit_proposal", "ok")) == 1
        assert ("approve_proposal", "denied") in ops  # the agent's and the unknown id's
