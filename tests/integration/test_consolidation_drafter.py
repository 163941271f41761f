"""Consolidation with the optional model drafter, a real local HTTP server standing in for
the OpenAI-compatible model, on real PostgreSQL: its statement becomes the proposal's text
(sealed with the proposal's key, published on approval, shredded when a source is
erased); a failure or a bad answer falls back to the extractive draft, which records why,
and /metrics counts both."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import InvalidState
from memwarden.domain.model.events import ProposalDrafted, ProposalTextDrafted
from memwarden.domain.settings import Settings
from memwarden.projections.listing import ListQuery
from memwarden.projections.rebuild import Rebuilder
from tests.integration.test_consolidation_erasure import (
    AGENT,
    FACT,
    NS,
    REORDERED,
    REVIEWER,
    drafted,
    stored_anywhere,
)
from tests.local_http import LocalServer, send
from tests.processes import METRICS_AUTH

WORDED = "Staging is rebuilt from the golden image on Sunday nights (platform team)"


def completion(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def statement(text: str) -> bytes:
    return completion(json.dumps({"statement": text}))


class Model:
    """The stand-in model: answers every request with ``status`` and ``body``."""

    def __init__(self) -> None:
        self.status = 200
        self.body = statement(WORDED)
        self.server = LocalServer(self.respond)

    def respond(self, handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, self.status, self.body)


@pytest.fixture
def model() -> Iterator[Model]:
    stub = Model()
    with stub.server:
        yield stub


@pytest.fixture
def runtime(settings: Settings, model: Model) -> Iterator[Runtime]:
    configured = msgspec.structs.replace(
        settings, drafter="openai", drafter_url=model.server.url, drafter_model="drafter-model"
    )
    with Runtime(configured) as rt:
        yield rt


def proposals_metric(rt: Runtime) -> dict[tuple[str, str], float]:
    rt.reads.runner.catch_up()
    with TestClient(app=create_app(runtime=rt)) as client:
        text = client.get("/metrics", headers=METRICS_AUTH).text
    found = re.findall(
        r'^memwarden_consolidation_proposals\{drafter="(.*?)",fallback="(.*?)"\} (\S+)$', text, re.M
    )
    return {(d, f): float(n) for d, f, n in found}


def test_the_models_statement_is_the_proposal_and_approval_publishes_it(
    runtime: Runtime, model: Model, database: ConnectionParams
) -> None:
    proposal_id, other, chosen = drafted(runtime)
    proposal = runtime.consolidation.proposal(proposal_id)
    assert proposal is not None
    assert (proposal.drafter, proposal.fallback, proposal.drafted_content) == ("openai", None, WORDED)
    assert runtime.consolidation.content(proposal) == WORDED
    (request,) = [body for _, _, body in model.server.requests]
    assert FACT in request["messages"][1]["content"]
    assert REORDERED in request["messages"][1]["content"]
    events = [r.event for r in runtime.ledger.read(0, 10_000)]
    assert [type(e) for e in events if isinstance(e, ProposalDrafted | ProposalTextDrafted)] == [
        ProposalDrafted,
        ProposalTextDrafted,
    ]
    assert stored_anywhere(database, "golden image on Sunday nights") == []  # sealed on the ledger

    runtime.reads.runner.catch_up()
    head = runtime.ledger.head_position()
    (listed,) = runtime.reads.proposals(REVIEWER, ListQuery(status="pending_review"), after=head).items
    assert (listed.drafter, listed.fallback) == ("openai", None)
    assert proposals_metric(runtime) == {("openai", ""): 1.0}

    approved = runtime.consolidation.approve(REVIEWER, proposal_id)
    assert approved.content == WORDED
    assert approved.proposal.document_id is not None
    (published,) = runtime.consolidation.knowledge.versions(approved.proposal.document_id)
    assert published.body == WORDED
    assert {other, chosen} == set(approved.proposal.sources)

    again = runtime.consolidation.consolidate(NS, runtime.ledger.head_position(), "worker-2")
    assert again.drafted == ()
    assert len(model.server.requests) == 1  # a cluster is worded once

    runtime.reads.runner.catch_up()  # every read model replays the new event as it applied it
    rebuilder = Rebuilder(runtime.reads.runner)
    for status in runtime.reads.runner.status():
        assert rebuilder.rebuild(status.name, verify=True, switch=False).differences == [], status.name


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b'{"error": "overloaded"}', "http_error"),
        (200, b"<html>not json</html>", "bad_answer"),
        (200, completion("Staging is rebuilt on Sundays"), "bad_answer"),
        (200, statement("Staging is rebuilt\u200b on Sunday nights"), "invisible_character"),
        (200, statement("Staging is rebuilt\x00 on Sunday nights"), "unstorable_text"),
        (200, statement("Rebuilt on Sundays. " * 500), "too_long"),
        (200, statement("ok"), "low_information"),
    ],
)
def test_a_failure_or_a_bad_answer_falls_back_to_the_extractive_draft_and_is_counted(
    runtime: Runtime, model: Model, status: int, body: bytes, reason: str
) -> None:
    model.status, model.body = status, body
    proposal_id, _other, chosen = drafted(runtime)
    proposal = runtime.consolidation.proposal(proposal_id)
    assert proposal is not None
    assert (proposal.drafter, proposal.fallback, proposal.drafted_content) == ("extractive", reason, None)
    assert proposal.canonical == chosen
    assert runtime.consolidation.content(proposal) == REORDERED  # the extractive choice's text
    assert not any(isinstance(r.event, ProposalTextDrafted) for r in runtime.ledger.read(0, 10_000))
    assert runtime.ledger.data_keys.get(proposal_id) is None  # nothing sealed for it
    assert proposals_metric(runtime) == {("extractive", reason): 1.0}


def test_an_unreachable_model_or_a_spent_budget_falls_back(runtime: Runtime, model: Model) -> None:
    model.server.stop()
    proposal_id, _other, _chosen = drafted(runtime)
    proposal = runtime.consolidation.proposal(proposal_id)
    assert proposal is not None
    assert (proposal.drafter, proposal.fallback) == ("extractive", "unreachable")

    runtime.consolidation.drafter_budget_seconds = 0.0
    first = runtime.memory.write(
        AGENT, WriteMemory(content="Lunch is served in the atrium on Fridays at noon")
    )
    second = runtime.memory.write(
        AGENT, WriteMemory(content="On Fridays at noon lunch is served in the atrium")
    )
    result = runtime.consolidation.consolidate(NS, second.position, "worker-1")
    (late,) = [runtime.consolidation.proposal(p) for p in result.drafted]
    assert late is not None
    assert set(late.sources) == {first.id, second.id}
    assert (late.drafter, late.fallback) == ("extractive", "over_budget")


def test_erasing_any_source_shreds_the_models_statement(runtime: Runtime) -> None:
    proposal_id, other, _chosen = drafted(runtime)
    assert runtime.ledger.data_keys.get(proposal_id) is not None
    runtime.core.erasure.forget(REVIEWER, Forget(ids=(other,), reason="request"))  # not the chosen one
    state = runtime.consolidation.proposal(proposal_id)
    assert state is not None
    assert state.drafted_content == ""
    assert runtime.consolidation.content(state) is None
    assert runtime.ledger.data_keys.get(proposal_id) is None
    with pytest.raises(InvalidState):
        runtime.consolidation.approve(REVIEWER, proposal_id)
    with pytest.raises(InvalidState):
        runtime.consolidation.edit(REVIEWER, proposal_id, "A new text for the staging rebuilds")
