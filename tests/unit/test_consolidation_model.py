"""The consolidation model: clusters, the extractive drafter, proposals drafted once, and a
reviewer's answers (pure: no ledger)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import pytest
from msgspec.structs import replace

from memwarden.domain.model.classification import Classification
from memwarden.domain.model.consolidation import (
    Cluster,
    Links,
    decide_drafts,
    decide_edit,
    decide_reject,
    evolve_proposal,
    extractive_choice,
    faulted_together,
    find_clusters,
    near_missed,
    proposal_content,
    proposal_stream,
)
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound
from memwarden.domain.model.events import ContextFaulted, MemoryWritten, Provenance
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState, evolve_memory

NOW = datetime(2026, 3, 1, tzinfo=UTC)
NS = "acme/eng"
REVIEWER = Identity(namespace="acme", actor="rev", role="admin")


def memory(content: str, source: str = "conversation", minutes: int = 0, **slot: str) -> MemoryState:
    event = MemoryWritten(
        memory_id=uuid4(),
        namespace=NS,
        actor="bot",
        type="fact",
        scope="team",
        content=content,
        provenance=(Provenance(source=source, actor="bot"),),
        valid_from=NOW - timedelta(hours=1),
        status="active",
        trust_tier="canonical",
        classification=Classification(),
        at=NOW - timedelta(minutes=60 - minutes),
        **slot,  # type: ignore[arg-type]
    )
    return evolve_memory(None, event)


def test_near_duplicates_join_transitively_and_only_current_ones() -> None:
    a, b, c, d = (memory(t, minutes=i) for i, t in enumerate("abcd"))
    retired = replace(d, status="retired", retired_at=NOW - timedelta(minutes=1))
    clusters = find_clusters(
        NS, [a, b, c, retired], Links(duplicates=((a.id, b.id), (b.id, c.id), (c.id, retired.id))), NOW
    )
    assert clusters == [Cluster(kind="near_duplicate", members=tuple(sorted((a.id, b.id, c.id), key=str)))]


def test_a_slot_with_two_versions_is_a_cluster_and_one_alone_is_not() -> None:
    one = memory("x", subject="pager", attribute="rotation")
    two = memory("y", minutes=1, subject="pager", attribute="rotation")
    alone = memory("z", subject="pager", attribute="owner")
    assert [c.kind for c in find_clusters(NS, [one, two, alone], Links(), NOW)] == ["slot_history"]


def test_the_extractive_drafter_takes_the_highest_trust_then_the_newest() -> None:
    old_doc = memory("a", source="document", minutes=0)
    newer_chat = memory("b", minutes=5)
    newest_doc = memory("c", source="document", minutes=9)
    assert extractive_choice([old_doc, newer_chat]).id == old_doc.id
    assert extractive_choice([old_doc, newer_chat, newest_doc]).id == newest_doc.id


def test_a_cluster_is_drafted_once() -> None:
    a, b = memory("a"), memory("b", minutes=1)
    cluster = find_clusters(NS, [a, b], Links(duplicates=((a.id, b.id),)), NOW)
    states = {a.id: a, b.id: b}
    drafts = decide_drafts(NS, cluster, states, set(), 3, NOW)
    assert [(d.canonical, d.token, d.proposal_id) for d in drafts] == [
        (b.id, 3, proposal_stream(NS, cluster[0]))
    ]
    assert decide_drafts(NS, cluster, states, {drafts[0].proposal_id}, 4, NOW) == []


def test_reviewers_edit_within_their_subtree_and_a_rejection_is_final() -> None:
    a, b = memory("a"), memory("b", minutes=1)
    drafted = decide_drafts(
        NS,
        find_clusters(NS, [a, b], Links(duplicates=((a.id, b.id),)), NOW),
        {a.id: a, b.id: b},
        set(),
        1,
        NOW,
    )
    state = evolve_proposal(None, drafted[0])
    assert proposal_content(state, b) == "b"
    assert proposal_content(state, replace(b, status="erased", content=None)) is None
    with pytest.raises(NotFound):
        decide_edit(Identity(namespace="beta", actor="x", role="admin"), state, "t", NOW)
    with pytest.raises(Forbidden):
        decide_edit(Identity(namespace="acme", actor="x", role="agent"), state, "t", NOW)
    for bad in ("a\x00b", "\ud800", " ", "x" * 8_001):
        with pytest.raises(InvalidRequest):
            decide_edit(REVIEWER, state, bad, NOW)
    edited = evolve_proposal(state, decide_edit(REVIEWER, state, "canonical", NOW))
    assert proposal_content(edited, b) == "canonical"
    rejected = evolve_proposal(edited, decide_reject(REVIEWER, edited, NOW))
    assert rejected.status == "rejected"
    with pytest.raises(InvalidState):
        decide_reject(REVIEWER, rejected, NOW)
    assert isinstance(rejected.id, UUID)


def fault(tier: str, refs: tuple[UUID, ...] = (), best: UUID | None = None) -> ContextFaulted:
    return ContextFaulted(
        fault_id=uuid4(),
        namespace=NS,
        actor="bot",
        tier=tier,  # type: ignore[arg-type]
        score=0.5,
        best_candidate=best,
        refs=refs,
        at=NOW,
    )


def test_facts_answering_two_faults_together_are_a_cluster_and_one_fault_is_not() -> None:
    a, b, c = (memory(t, minutes=i) for i, t in enumerate("abc"))
    twice = faulted_together([fault("L2", (a.id, b.id, c.id)), fault("L2", (b.id, a.id))])
    assert twice == (tuple(sorted((a.id, b.id), key=str)),)
    assert faulted_together([fault("L2", (a.id, b.id)), fault("L3", (a.id, b.id))]) == ()
    clusters = find_clusters(NS, [a, b, c], Links(together=twice), NOW)
    assert clusters == [Cluster(kind="faulted_together", members=tuple(sorted((a.id, b.id), key=str)))]


def test_a_near_miss_is_the_best_candidate_of_a_fault_l2_did_not_answer() -> None:
    a, b, c = uuid4(), uuid4(), uuid4()
    faults = [fault("miss", best=a), fault("L3", best=b), fault("L2", (c,), best=c), fault("miss", best=a)]
    assert near_missed(faults) == [a, b]


def test_memories_of_another_namespace_join_no_cluster() -> None:
    a, b = memory("a"), memory("b", minutes=1)
    ancestor = replace(b, namespace="acme")
    assert find_clusters(NS, [a, ancestor], Links(near_misses=((a.id, ancestor.id),)), NOW) == []
    pair = Links(near_misses=((a.id, b.id),))
    assert [c.kind for c in find_clusters(NS, [a, b], pair, NOW)] == ["fault_near_miss"]
