"""Erasure reaches what consolidation drafted from a memory: a reviewer's edit of a
proposal (sealed with the proposal's key, destroyed in the same transaction) and the L3
knowledge version its approval published (erased with the memory, on the certificate); an
extractive draft is erased only with the memory it chose."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

import psycopg
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import InvalidState
from memwarden.domain.model.events import KnowledgeErased
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings

AGENT = Identity(namespace="acme/eng/platform", actor="bot", role="agent")
REVIEWER = Identity(namespace="acme/eng", actor="rev", role="admin")
NS = AGENT.namespace
FACT = "The staging cluster is rebuilt from the golden image every Sunday night"
REORDERED = "Every Sunday night the staging cluster is rebuilt from the golden image"
EDIT = "Staging: rebuilt from the golden image on Sunday nights (ask Priya, ext. 4471)"


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as rt:
        yield rt


def drafted(rt: Runtime) -> tuple[UUID, UUID, UUID]:
    """A near-duplicate proposal: (proposal, the memory it did not choose, the chosen one)."""
    first = rt.memory.write(AGENT, WriteMemory(content=FACT))
    second = rt.memory.write(AGENT, WriteMemory(content=REORDERED))
    assert first.id is not None
    assert second.id is not None
    result = rt.consolidation.consolidate(NS, second.position, "worker-1")
    assert len(result.drafted) == 1
    proposal = rt.consolidation.proposal(result.drafted[0])
    assert proposal is not None
    assert proposal.canonical == second.id  # equal trust: the newest
    return proposal.id, first.id, second.id


def stored_anywhere(params: ConnectionParams, text: str) -> list[str]:
    """Every table of the schema whose rows, as text, hold ``text``."""
    found: list[str] = []
    with psycopg.connect(params.conninfo()) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'memwarden'"
        ).fetchall()
        for (table,) in tables:
            row = conn.execute(
                f'SELECT 1 FROM memwarden."{table}" t WHERE t::text LIKE %s LIMIT 1',
                (f"%{text}%",),
            ).fetchone()
            if row is not None:
                found.append(table)
    return found


def test_erasing_a_source_shreds_the_edit_of_a_pending_proposal(runtime: Runtime) -> None:
    proposal_id, other, _chosen = drafted(runtime)
    runtime.consolidation.edit(REVIEWER, proposal_id, EDIT)
    assert runtime.ledger.data_keys.get(proposal_id) is not None
    runtime.core.erasure.forget(REVIEWER, Forget(ids=(other,), reason="request"))
    state = runtime.consolidation.proposal(proposal_id)
    assert state is not None
    assert runtime.consolidation.content(state) is None
    assert runtime.ledger.data_keys.get(proposal_id) is None
    with pytest.raises(InvalidState):
        runtime.consolidation.approve(REVIEWER, proposal_id)
    with pytest.raises(InvalidState):
        runtime.consolidation.edit(REVIEWER, proposal_id, "A new text")


def test_erasing_a_source_erases_the_knowledge_an_edited_proposal_published(
    runtime: Runtime, database: ConnectionParams
) -> None:
    proposal_id, other, _chosen = drafted(runtime)
    runtime.consolidation.edit(REVIEWER, proposal_id, EDIT)
    approved = runtime.consolidation.approve(REVIEWER, proposal_id)
    document = approved.proposal.document_id
    assert document is not None
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert stored_anywhere(database, "ext. 4471")  # the projections hold the published text
    result = runtime.core.erasure.forget(REVIEWER, Forget(ids=(other,), reason="request"))
    assert result.certificate.erased_documents == (document,)
    assert result.certificate.count == 2
    erased = [r.event for r in runtime.ledger.read(0, 100_000) if isinstance(r.event, KnowledgeErased)]
    assert [e.document_id for e in erased] == [document]
    runtime.reads.wait_for(runtime.ledger.head_position())
    assert stored_anywhere(database, "ext. 4471") == []
    answer = runtime.working_sets.fault(
        AGENT, "Who do I ask about the staging rebuild?", after=result.position
    )
    assert all("4471" not in b.content for b in answer.blocks)


def test_an_extractive_draft_goes_with_the_memory_it_chose_only(runtime: Runtime) -> None:
    proposal_id, other, chosen = drafted(runtime)
    approved = runtime.consolidation.approve(REVIEWER, proposal_id)
    document = approved.proposal.document_id
    assert document is not None
    kept = runtime.core.erasure.forget(REVIEWER, Forget(ids=(other,), reason="request"))
    assert kept.certificate.erased_documents == ()  # its text is the chosen memory's
    assert runtime.consolidation.knowledge.versions(document)[0].body == REORDERED
    taken = runtime.core.erasure.forget(REVIEWER, Forget(ids=(chosen,), reason="request"))
    assert taken.certificate.erased_documents == (document,)
    assert all(v.body != REORDERED for v in runtime.consolidation.knowledge.versions(document))
