"""Split writes racing on the real PostgreSQL: each write's facts go in one append, and a
fact two writes share is stored once (the loser's append conflicts and it re-decides).
The extractor is a real chat-completions server on the loopback interface."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import msgspec
import pytest

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import Settings
from tests.integration.test_concurrency import RACERS, race
from tests.local_http import LocalServer, send

SHARED = "The platform team deploys on Fridays."


def facts_of_each_transcript(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """Every transcript states the shared fact, then one of its own."""
    transcript = body["messages"][1]["content"]
    answer = json.dumps([SHARED, f"{transcript} was reported by its own writer."])
    send(handler, 200, json.dumps({"choices": [{"message": {"content": answer}}]}).encode())


def incident(core: Core, n: int) -> Callable[[], WriteResult]:
    """Writer ``n``'s transcript, written through its own Core (its own process, in effect)."""
    identity = Identity("acme/eng", f"bot{n}", "agent")
    return lambda: core.memory.write(identity, WriteMemory(content=f"Incident {n}"))


def test_racing_split_writes_store_a_shared_fact_once(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")
    with LocalServer(facts_of_each_transcript) as server:
        configured = msgspec.structs.replace(settings, extractor_url=server.url, extractor_model="m")
        cores = [open_core(configured) for _ in range(RACERS)]
        try:
            results = race([incident(core, n) for n, core in enumerate(cores)])
            audits = [r.event for r in cores[0].ledger.read(0, 10_000) if isinstance(r.event, AuditRecorded)]
        finally:
            for core in cores:
                core.close()

    assert all(r.extracted and len(r.facts) == 2 for r in results)
    shared = [r.facts[0] for r in results]
    assert Counter(f.outcome for f in shared) == {"stored": 1, "deduplicated": RACERS - 1}
    assert len({f.id for f in shared}) == 1
    assert [r.facts[1].outcome for r in results] == ["stored"] * RACERS
    assert len({r.facts[1].id for r in results}) == RACERS
    writes = [a for a in audits if a.op == "write"]
    assert len(writes) == RACERS  # one record per write, whatever the retries
    assert {a.detail.split(":")[0] for a in writes} == {"extracted=true, 2 facts"}
