"""`verbatim` over HTTP (docs/architecture.md section 4, step 2): with an extractor configured, a write
is split into facts, each decided like any write, in one append with its audit record;
without one, or when it fails, the content is stored verbatim and the result and the
audit record say why. The extractor is a real HTTP server speaking the OpenAI
chat-completions protocol, on the loopback interface."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import AuditRecorded, MemoryWritten
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api
from tests.local_http import LocalServer, send
from tests.processes import TIMED

TRANSCRIPT = (
    "standup: Dana said she moved to Berlin in May 2026; she still leads the platform team. "
    "Kim now owns the billing service. ok."
)
FACTS = [
    "Dana moved to Berlin in May 2026.",
    "Dana leads the platform team.",
    "Kim owns the billing service.",
    "ok",
]
TIMEOUT = 0.5


class Model:
    """A chat-completions endpoint whose answer (and delay) each test sets."""

    def __init__(self) -> None:
        self.answer = json.dumps(FACTS)
        self.status = 200
        self.delay = 0.0
        self.server = LocalServer(self._respond)

    def _respond(self, handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        time.sleep(self.delay)
        reply = {"object": "chat.completion", "choices": [{"index": 0, "message": {"content": self.answer}}]}
        with contextlib.suppress(ConnectionError):  # the client may have timed out first
            send(handler, self.status, json.dumps(reply).encode())

    @property
    def calls(self) -> int:
        return len(self.server.requests)

    def last_content(self) -> str:
        content: str = self.server.requests[-1][2]["messages"][1]["content"]
        return content


@pytest.fixture
def model() -> Iterator[Model]:
    made = Model()
    with made.server:
        yield made


@contextmanager
def served(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)


@pytest.fixture
def api(settings: Settings, model: Model, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    configured = msgspec.structs.replace(
        settings,
        extractor_url=model.server.url,
        extractor_model="small-model",
        extractor_timeout=TIMEOUT,
        extractor_max_input_chars=400,
    )
    with served(configured) as opened:
        yield opened


def write_audits(api: Api) -> list[AuditRecorded]:
    return [r for r in api.audit_records() if r.op == "write"]


def audit_route_details(api: Api) -> list[str]:
    """The write records as compliance staff see them, through the audit route."""
    auditor = api.key("acme", "audrey", "auditor")
    page = api.call(auditor, "/v1/compliance/audit?op=write&limit=100", method="GET")
    assert page.status_code == 200
    return [r["detail"] for r in page.json()["items"]]


def test_a_write_is_split_into_facts_each_decided_in_one_append(api: Api, model: Model) -> None:
    agent = api.key("acme/eng", "bot", "agent", "document")
    known = api.mem(agent, "write", {"content": "Dana leads the platform team.", "verbatim": True}).json()
    assert (known["extracted"], known["verbatim_reason"], model.calls) == (False, "verbatim_requested", 0)
    body = {"content": TRANSCRIPT, "tags": ["standup"], "provenance": {"source": "document", "ref": "doc:42"}}
    response = api.mem(agent, "write", body)
    assert response.status_code == 200
    result = response.json()
    assert model.last_content() == TRANSCRIPT
    assert result["extracted"] is True
    assert result["verbatim_reason"] is None
    facts = result["facts"]
    assert [f["outcome"] for f in facts] == ["stored", "deduplicated", "stored", "rejected"]
    assert facts[1]["id"] == known["id"]  # the normal dedupe, against the own namespace
    assert [r["reason"] for r in facts[3]["rejected"]] == ["low_information"]
    assert facts[3]["id"] is None
    # the top level is the first fact, so the single-fact contract still reads right
    assert {k: result[k] for k in facts[0]} == facts[0]

    # one append: the facts' events and the audit record, which comes last and names them
    records = api.runtime.ledger.read(known["position"], 1000)
    positions = [int(r.position or 0) for r in records]
    assert positions == list(range(known["position"] + 1, result["position"] + 1))
    written = [r.event for r in records if isinstance(r.event, MemoryWritten)]
    assert [w.content for w in written] == [FACTS[0], FACTS[2]]  # the transcript itself is not kept
    assert all(w.embedding is not None for w in written)  # embedded before the append, together
    audit = records[-1].event
    assert isinstance(audit, AuditRecorded)
    assert audit.op == "write"
    assert audit.outcome == "ok"
    assert audit.detail == "extracted=true, 4 facts: stored, deduplicated, stored, rejected: low_information"
    assert [str(s) for s in audit.subject_ids] == [facts[0]["id"], known["id"], facts[2]["id"]]

    for fact, text in ((facts[0], FACTS[0]), (facts[2], FACTS[2])):
        memory = api.mem(agent, "read", {"id": fact["id"]}).json()
        assert memory["content"] == text
        assert memory["status"] == "active"  # one ref for both: neither refreshes the other
        assert memory["tags"] == ["standup", "extracted"]
        assert [(p["source"], p["actor"], p["ref"]) for p in memory["provenance"]] == [
            ("document", "bot", "doc:42")
        ]

    again = api.mem(agent, "write", body).json()  # the same transcript again: nothing new
    assert [f["outcome"] for f in again["facts"]] == [
        "deduplicated",
        "deduplicated",
        "deduplicated",
        "rejected",
    ]


def test_verbatim_true_stores_the_content_whole_without_asking_the_model(api: Api, model: Model) -> None:
    agent = api.key("acme/eng", "bot", "agent", "document")
    result = api.mem(agent, "write", {"content": TRANSCRIPT, "verbatim": True}).json()
    assert model.calls == 0
    assert (result["outcome"], result["extracted"], result["verbatim_reason"]) == (
        "stored",
        False,
        "verbatim_requested",
    )
    assert result["facts"] == []
    memory = api.mem(agent, "read", {"id": result["id"]}).json()
    assert (memory["content"], memory["tags"]) == (TRANSCRIPT, [])
    assert audit_route_details(api) == ["extracted=false (verbatim_requested): stored"]


@TIMED
def test_every_failure_of_the_extractor_stores_verbatim_and_says_why(api: Api, model: Model) -> None:
    agent = api.key("acme/eng", "bot", "agent", "document")
    model.answer = "Sure! Dana moved to Berlin, and Kim owns billing."
    model_failures = [(f"{TRANSCRIPT} (garbage)", "extractor_failed: bad_output")]
    results = [api.mem(agent, "write", {"content": model_failures[-1][0]}).json()]

    model.answer = "[]"
    model_failures.append((f"{TRANSCRIPT} (empty)", "extractor_failed: empty"))
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())

    model.answer, model.status = json.dumps(FACTS), 500
    model_failures.append((f"{TRANSCRIPT} (500)", "extractor_failed: http_error"))
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())

    model.answer, model.status = json.dumps(["ok", "thanks"]), 200  # nothing worth keeping
    model_failures.append((f"{TRANSCRIPT} (fragments)", "facts_rejected"))
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())

    model.delay = 8 * TIMEOUT
    model_failures.append((f"{TRANSCRIPT} (slow)", "extractor_failed: timeout"))
    started = time.monotonic()
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())
    assert time.monotonic() - started < 5 * TIMEOUT  # the write did not wait for the answer
    model.delay = 0.0

    calls = model.calls
    model_failures.append((TRANSCRIPT * 4, "over_budget"))  # over the 400-character input budget
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())
    slot = {"content": "Dana's city is Berlin", "subject": "dana", "attribute": "city", "value": "Berlin"}
    model_failures.append((slot["content"], "structured"))  # a slot's value is one fact already
    results.append(api.mem(agent, "write", slot).json())
    full = [f"t{n}" for n in range(64)]  # no room left for the extracted tag
    model_failures.append((f"{TRANSCRIPT} (tags)", "tags_full"))
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0], "tags": full}).json())
    assert model.calls == calls

    model.server.stop()  # the extractor goes down
    model_failures.append((f"{TRANSCRIPT} (down)", "extractor_failed: unreachable"))
    results.append(api.mem(agent, "write", {"content": model_failures[-1][0]}).json())

    for result, (content, reason) in zip(results, model_failures, strict=True):
        assert (result["outcome"], result["extracted"], result["verbatim_reason"]) == (
            "stored",
            False,
            reason,
        )
        assert result["facts"] == []
        assert api.mem(agent, "read", {"id": result["id"]}).json()["content"] == content
    assert audit_route_details(api) == [f"extracted=false ({reason}): stored" for _, reason in model_failures]


def test_an_async_write_is_split_when_it_runs(api: Api, model: Model) -> None:
    agent = api.key("acme/eng", "bot", "agent", "document")
    ticket = api.mem(agent, "write", {"content": TRANSCRIPT, "async": True}).json()["ticket"]
    deadline = time.monotonic() + 10
    status = api.mem(agent, "write_status", {"ticket": ticket}).json()
    while status["state"] in {"pending", "running"} and time.monotonic() < deadline:
        time.sleep(0.05)
        status = api.mem(agent, "write_status", {"ticket": ticket}).json()
    assert status["state"] == "done"
    assert status["result"]["extracted"] is True
    assert [f["outcome"] for f in status["result"]["facts"]] == ["stored", "stored", "stored", "rejected"]
    assert model.last_content() == TRANSCRIPT


def test_without_an_extractor_every_write_says_no_extractor(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    with served(settings) as api:
        agent = api.key("acme/eng", "bot", "agent", "document")
        for verbatim in (False, True):
            # "True"/"False" would be antonyms: the second write superseded the first once projected
            content = f"{TRANSCRIPT} ({'verbatim' if verbatim else 'as facts'})"
            result = api.mem(agent, "write", {"content": content, "verbatim": verbatim})
            assert result.status_code == 200
            body = result.json()
            assert (body["extracted"], body["verbatim_reason"], body["facts"]) == (False, "no_extractor", [])
        assert [a.detail for a in write_audits(api)] == ["extracted=false (no_extractor): stored"] * 2
