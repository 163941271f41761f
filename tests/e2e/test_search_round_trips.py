"""What one search over HTTP sends to PostgreSQL, in five round trips: a view opened (its
BEGIN included) in one statement, one per lane (each with its hits' write-order
neighbours), one to hydrate with the view's COMMIT in the same pipeline, and the read's
audit record; nothing is read twice, and a connection in steady use is not pinged. A
statement more is a round trip more on every search (issue 27)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from tests.e2e.api_helpers import Api, audit_records

AGENT = Identity(namespace="acme/eng", actor="bot", role="agent")


def test_a_search_is_a_view_two_lanes_a_hydration_and_its_audit_record(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = api.runtime
    for n in range(60):
        rt.memory.write(AGENT, WriteMemory(content=f"note {n}: the build {n % 7} failed on runner {n % 13}"))
    rt.reads.wait_for(rt.ledger.head_position())
    key = api.key("acme/eng", "bot", "agent")
    body = {"query": "which build failed on the runner", "k": 10}
    assert api.mem(key, "search", body).status_code == 200  # statements prepared, caches warm
    sent: list[tuple[str, bool]] = []
    handler: list[str] = []
    execute = psycopg.Cursor.execute

    def traced(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if handler and threading.current_thread().name == handler[0]:
            text = query if isinstance(query, str) else query.as_string(self.connection)
            sent.append((" ".join(text.split())[:60], self.connection._pipeline is not None))
        return execute(self, query, params, **kw)

    def search(*args: Any, **kw: Any) -> Any:
        handler.append(threading.current_thread().name)
        return searching(*args, **kw)

    searching = rt.reads.search.search
    monkeypatch.setattr(rt.reads.search, "search", search)
    monkeypatch.setattr(psycopg.Cursor, "execute", traced)
    audits = len(audit_records(rt))
    answer = api.mem(key, "search", body)
    assert answer.status_code == 200
    assert len(answer.json()["results"]) == 10
    assert [(s.split()[0] if s else "(ping)", pipelined) for s, pipelined in sent] == [
        ("BEGIN", False),
        ("WITH", False),
        ("WITH", False),
        ("SELECT", True),
        ("COMMIT", True),
        ("CALL", False),
    ], sent
    assert "mw_append_announced" in sent[-1][0]
    assert len(audit_records(rt)) == audits + 1


def test_every_search_is_audited_even_when_many_run_at_once(api: Api) -> None:
    """Searches at once share the ledger's commits (group commit); each still has its own
    audit record, appended before its answer went out."""
    rt = api.runtime
    for n in range(30):
        rt.memory.write(AGENT, WriteMemory(content=f"note {n}: the deploy {n % 5} waited on review {n % 3}"))
    rt.reads.wait_for(rt.ledger.head_position())
    key = api.key("acme/eng", "bot", "agent")
    before = [r for r in audit_records(rt) if r.op == "search"]
    answers: list[int] = []

    def ask(n: int) -> None:
        answers.extend(
            api.mem(key, "search", {"query": f"deploy {n} review {m}", "k": 5}).status_code for m in range(4)
        )

    threads = [threading.Thread(target=ask, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [200] * 24
    searches = [r for r in audit_records(rt) if r.op == "search"]
    assert len(searches) == len(before) + 24
    assert all(r.outcome == "ok" and r.actor == "bot" for r in searches[len(before) :])


def test_an_erasure_or_a_supersedence_is_seen_by_the_next_search(api: Api) -> None:
    """Nothing a search read is kept for the next one: an erased memory and a superseded
    one are gone from the next search, neither a hit nor lent a neighbour's score."""
    agent = api.key("acme/eng", "bot", "agent")
    admin = api.key("acme/eng", "alice", "admin")

    def write(body: dict[str, str]) -> str:
        answer = api.mem(agent, "write", body)
        assert answer.status_code == 200, answer.text
        return str(answer.json()["id"])

    erased = write(
        {
            "content": "Heliotrope ridge kestrels nest by the mast",
            "subject": "Dana",
            "attribute": "birds",
            "value": "kestrels",
        }
    )
    after_erased = write({"content": "The mast was repainted in May"})
    oslo = write(
        {"content": "Heliotrope office is in Oslo", "subject": "office", "attribute": "city", "value": "Oslo"}
    )
    after_oslo = write({"content": "The lease was signed by Kim"})

    def found() -> list[str]:
        answer = api.mem(agent, "search", {"query": "heliotrope ridge office kestrels", "k": 10})
        assert answer.status_code == 200
        return [r["id"] for r in answer.json()["results"]]

    first = found()
    assert {erased, after_erased, oslo, after_oslo} <= set(first)  # the replies through context
    forgot = api.mem(admin, "forget", {"subject": "stakeholder:dana", "reason": "request"})
    assert forgot.status_code == 200, forgot.text
    lisbon = write(
        {
            "content": "Heliotrope office is in Lisbon",
            "subject": "office",
            "attribute": "city",
            "value": "Lisbon",
        }
    )
    second = found()
    assert erased not in second
    assert oslo not in second
    assert lisbon in second
