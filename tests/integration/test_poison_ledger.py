"""Projections are total: a ledger that already holds what an older version accepted (text
PostgreSQL cannot store, times outside years 1-9999 in UTC) projects, answers every read,
takes the next write and a forget, rebuilds to the same tables, verifies, and is ready.

Each case is seeded as an older version would have appended it: a write runs through the
service of a first process whose ledger appends the event with the poison in it (no
decider sees it); a second process then opens the same data, as after an upgrade.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import msgspec
import psycopg
import pytest
from litestar.testing import TestClient

from memwarden.api.cli.main import main
from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import HashEmbedder
from memwarden.domain.ledger.app import Ledger, NewMemoryKey
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, WriteMemory
from memwarden.domain.model.events import (
    AuditRecorded,
    DisputeOpened,
    DisputeResolved,
    Event,
    KnowledgePublished,
    MemoryReaffirmed,
    MemoryRetired,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.settings import SCHEMA, Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.sanitize import EARLIEST, LATEST, REPLACEMENT
from memwarden.projections.timeline.service import AsOfQuestion
from memwarden.projections.tracking import ERRORS_TABLE
from tests.e2e.api_helpers import Api

NAMESPACE = "acme/eng"
AGENT = Identity(NAMESPACE, "agent-1", "agent")
NUL = "\x00"
SURROGATE = "\ud800"
YEAR_0 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # 0000-12-31T23:00Z
YEAR_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))  # 10000-01-01T00:59:59Z

Poison = Callable[[Event], Event]


def written(**fields: Any) -> Poison:
    """The memory's own event, with ``fields`` as an older version stored them."""

    def poison(event: Event) -> Event:
        if not isinstance(event, MemoryWritten):
            return event
        values = {name: value(event) if callable(value) else value for name, value in fields.items()}
        return msgspec.structs.replace(event, **values)

    return poison


def audited(detail: str) -> Poison:
    def poison(event: Event) -> Event:
        return msgspec.structs.replace(event, detail=detail) if isinstance(event, AuditRecorded) else event

    return poison


def ref(text: str) -> Callable[[MemoryWritten], tuple[Provenance, ...]]:
    return lambda event: tuple(msgspec.structs.replace(p, ref=text) for p in event.provenance)


CASES: dict[str, Poison] = {
    "nul-in-content": written(content=f"Dana lives in {NUL}Lyon"),
    "nul-in-tag": written(tags=(f"home{NUL}town",)),
    "nul-in-selector": written(selectors=(f"channel:sl{NUL}ack",)),
    "nul-in-subject": written(subject=f"da{NUL}na"),
    "nul-in-attribute": written(attribute=f"ci{NUL}ty"),
    "nul-in-value": written(value=f"Ly{NUL}on"),
    "nul-in-provenance-ref": written(provenance=ref(f"doc{NUL}-1")),
    "nul-in-audit-detail": audited(f"stored; note {NUL}"),
    "valid-from-year-0-utc": written(valid_from=YEAR_0),
    "valid-from-year-10000-utc": written(valid_from=YEAR_10000),
    # valid_from defaults to event_time: an older version stored both
    "event-time-year-0-utc": written(event_time=YEAR_0, valid_from=YEAR_0),
    "event-time-year-10000-utc": written(event_time=YEAR_10000, valid_from=YEAR_10000),
    "invisible-characters-in-slot": written(subject="da\u200bna", attribute="ci\u00adty\u2060"),
}

SHOWN: dict[str, tuple[str, Any]] = {
    "nul-in-content": ("content", f"Dana lives in {REPLACEMENT}Lyon"),
    "nul-in-tag": ("tags", [f"home{REPLACEMENT}town"]),
    "nul-in-selector": ("selectors", [f"channel:sl{REPLACEMENT}ack"]),
    "nul-in-subject": ("subject", f"da{REPLACEMENT}na"),
    "nul-in-attribute": ("attribute", f"ci{REPLACEMENT}ty"),
    "nul-in-value": ("value", f"Ly{REPLACEMENT}on"),
    "valid-from-year-0-utc": ("valid_from", EARLIEST),
    "valid-from-year-10000-utc": ("valid_from", LATEST),
    "event-time-year-0-utc": ("event_time", EARLIEST),
    "event-time-year-10000-utc": ("event_time", LATEST),
    "invisible-characters-in-slot": ("subject", "da\u200bna"),
}
"""What a read of the memory shows of its poisoned field: the storable form."""

SURROGATE_CASES: dict[str, Poison] = {
    "surrogate-in-content": written(content=f"Dana lives in {SURROGATE}Lyon"),
    "surrogate-in-tag": written(tags=(f"home{SURROGATE}town",)),
    "surrogate-in-provenance-ref": written(provenance=ref(f"doc{SURROGATE}")),
    "surrogate-in-audit-detail": audited(f"stored; note {SURROGATE}"),
}


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")


@contextmanager
def appended_as_poisoned(ledger: Ledger, poison: Poison) -> Iterator[None]:
    """While open, ``ledger`` appends each event as ``poison`` makes it: what an older
    version, whose edge and deciders let such values through, put in the ledger."""

    def append(
        events: Sequence[Recorded],
        new_keys: Sequence[NewMemoryKey] = (),
        destroy_keys: Sequence[UUID] = (),
        *,
        tenant: str,
    ) -> int:
        changed = [dataclasses.replace(r, event=poison(r.event)) for r in events]
        return Ledger.append(ledger, changed, new_keys, destroy_keys, tenant=tenant)

    ledger.append = append  # type: ignore[method-assign]
    try:
        yield
    finally:
        del ledger.append


def seed(settings: Settings, poison: Poison) -> UUID:
    """One write on the slot (dana, city), appended with ``poison``, by a process that is
    then closed; the read models are left to the next process."""
    with Runtime(settings, follow=False) as old:
        return write_poisoned(old, poison)


def write_poisoned(old: Runtime, poison: Poison, subject: str = "dana") -> UUID:
    with appended_as_poisoned(old.ledger, poison):
        result = old.memory.write(
            AGENT,
            WriteMemory(
                content=f"{subject.capitalize()} lives in Lyon",
                subject=subject,
                attribute="city",
                value="Lyon",
                tags=("hometown",),
                selectors=("channel:slack",),
                event_time=datetime(2026, 1, 1, tzinfo=UTC),
            ),
        )
    assert result.outcome == "stored"
    assert result.id is not None
    return result.id


@pytest.fixture
def upgraded(settings: Settings, request: pytest.FixtureRequest) -> Iterator[tuple[Api, UUID, str]]:
    """The new version opened on a ledger seeded with the case ``request.param``."""
    memory_id = seed(settings, CASES[request.param])
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client), memory_id, request.param


def shown(body: dict[str, Any], field: str) -> Any:
    value = body[field]
    return datetime.fromisoformat(value) if field in ("valid_from", "event_time") else value


def stops(runtime: Runtime) -> list[str]:
    """Every projection's stop, as this process and the shared table report them."""
    found = [f"{s.name} at {s.stopped_at}: {s.error}" for s in runtime.reads.runner.status() if s.error]
    with psycopg.connect(runtime.core.params.conninfo(), autocommit=True) as conn:
        rows = conn.execute(f"SELECT name, position FROM {SCHEMA}.{ERRORS_TABLE}").fetchall()
    return found + [f"{name} recorded at {position}" for name, position in rows]


def at_head(api: Api) -> None:
    """Every projection reaches the ledger head, none stopped on the way."""
    api.settle()
    runtime = api.runtime
    assert stops(runtime) == []
    head = runtime.ledger.head_position()
    assert runtime.reads.runner.positions() == dict.fromkeys(runtime.reads.runner.positions(), head)


def answers(api: Api, key: str, auditor: str, memory_id: UUID) -> dict[str, Any]:
    """read, history, search and as-of (SQL, and the replay that proves it) all answer."""
    read = api.mem(key, "read", {"id": str(memory_id)})
    assert read.status_code == 200, read.text
    history = api.mem(key, "history", {"id": str(memory_id)})
    assert history.status_code == 200, history.text
    assert str(memory_id) in [v["id"] for v in history.json()["versions"]]
    search = api.mem(key, "search", {"query": "Dana Lyon"})
    assert search.status_code == 200, search.text
    now = datetime.now(UTC)
    for valid_at in (now, datetime(2, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC)):
        times = {"as_of": now.isoformat(), "valid_at": valid_at.isoformat()}
        search = api.mem(key, "search", {"query": "Dana Lyon", **times})
        assert search.status_code == 200, search.text
        asof = api.call(auditor, "/v1/compliance/asof", times)
        assert asof.status_code == 200, asof.text
        proof = api.runtime.reads.time_travel.verify(
            AsOfQuestion(scope=(NAMESPACE, "acme"), as_of=now, valid_at=valid_at)
        )
        assert proof.ok, proof.differences
    trail = api.call(auditor, "/v1/compliance/audit", method="GET")
    assert trail.status_code == 200, trail.text
    body: dict[str, Any] = read.json()
    return body


def rebuilt_and_verified(runtime: Runtime) -> None:
    rebuilder = Rebuilder(runtime.reads.runner)
    for projection in runtime.reads.runner.projections:
        report = rebuilder.rebuild(projection.name, verify=True)
        assert report.differences == [], (projection.name, report.differences)
    assert runtime.ledger.verify().ok


@pytest.mark.parametrize("upgraded", list(CASES), indirect=True)
def test_a_ledger_holding_what_an_older_version_accepted_projects_and_answers(
    upgraded: tuple[Api, UUID, str],
) -> None:
    api, memory_id, case = upgraded
    agent = api.key(NAMESPACE, "agent-2", "agent")
    auditor = api.key("acme", "audit", "auditor")
    admin = api.key(NAMESPACE, "lead", "admin")
    at_head(api)
    assert api.client.get("/readyz").status_code == 200
    read = answers(api, agent, auditor, memory_id)
    if case in SHOWN:
        field, expected = SHOWN[case]
        assert shown(read, field) == expected
    if case == "nul-in-audit-detail":
        records = api.call(auditor, "/v1/compliance/audit", method="GET").json()["items"]
        assert f"stored; note {REPLACEMENT}" in [r["detail"] for r in records]

    # the next write to the same slot supersedes the memory, and projects
    after = api.mem(
        agent,
        "write",
        {"content": "Dana lives in Oslo", "subject": "dana", "attribute": "city", "value": "Oslo"},
    )
    assert after.status_code == 200, after.text
    assert after.json()["outcome"] == "superseded"
    assert after.json()["supersedes"] == [str(memory_id)]
    at_head(api)
    answers(api, agent, auditor, memory_id)

    rebuilt_and_verified(api.runtime)
    at_head(api)

    # a forget of the memory projects too
    forget = api.mem(admin, "forget", {"ids": [str(memory_id)], "reason": "asked to"})
    assert forget.status_code == 200, forget.text
    assert forget.json()["erased"] >= 1
    at_head(api)
    erased = answers(api, agent, auditor, memory_id)
    assert erased["status"] == "erased"
    assert erased["content"] is None

    rebuilt_and_verified(api.runtime)
    at_head(api)
    assert api.client.get("/readyz").status_code == 200


@pytest.mark.parametrize("case", list(SURROGATE_CASES))
def test_a_lone_surrogate_never_reached_a_ledger(settings: Settings, case: str) -> None:
    """No version could append one: the ledger's encoders (msgspec JSON and msgpack) refuse
    it, so the append fails whole. The read models sanitize it all the same (unit tests)."""
    with pytest.raises(UnicodeEncodeError):
        seed(settings, SURROGATE_CASES[case])
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        api = Api(runtime, client)
        assert not [r for r in runtime.ledger.read(0, 100) if isinstance(r.event, MemoryWritten)]
        at_head(api)
        assert client.get("/readyz").status_code == 200


def reasons(text: str) -> Poison:
    """Every free-text reason of a dispute's life (opened, settled, the memory retired)."""

    def poison(event: Event) -> Event:
        if isinstance(event, DisputeOpened | DisputeResolved | MemoryRetired):
            return msgspec.structs.replace(event, reason=text)
        return event

    return poison


def test_a_dispute_settled_with_text_an_older_version_accepted_projects(settings: Settings) -> None:
    member = Identity(NAMESPACE, "dana", "member")
    admin = Identity(NAMESPACE, "lead", "admin")

    def on_the_rota(content: str, source: str) -> WriteMemory:
        return WriteMemory(
            content=content,
            subject="oncall",
            attribute="rota",
            provenance=ProvenanceClaim(source=source),
            event_time=datetime(2026, 1, 1, tzinfo=UTC),
        )

    with Runtime(settings, follow=False) as old, appended_as_poisoned(old.ledger, reasons(f"wiki{NUL}")):
        kept = old.memory.write(member, on_the_rota("The rota is in the wiki", "manual"))
        disputed = old.memory.write(AGENT, on_the_rota("The rota is in a sheet", "conversation"))
        assert disputed.outcome == "disputed"
        assert disputed.dispute_id is not None
        old.memory.resolve_dispute(
            admin, ResolveDispute(dispute_id=disputed.dispute_id, decision="keep_old", reason="settled")
        )
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        api = Api(runtime, client)
        reviewer = api.key(NAMESPACE, "lead", "admin")
        at_head(api)
        listed = api.call(reviewer, "/v1/admin/disputes?status=resolved", method="GET")
        assert listed.status_code == 200, listed.text
        (dispute,) = listed.json()["items"]
        assert (dispute["reason"], dispute["resolution_reason"]) == (f"wiki{REPLACEMENT}",) * 2
        history = api.mem(reviewer, "history", {"id": str(kept.id)})
        assert history.status_code == 200, history.text
        rebuilt_and_verified(runtime)
        at_head(api)
        assert client.get("/readyz").status_code == 200


def test_the_cli_rebuilds_verifies_and_replays_a_ledger_holding_every_case(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's commands on one ledger that holds every case at once."""
    with Runtime(settings, follow=False) as old:
        for n, poison in enumerate(CASES.values()):
            write_poisoned(old, poison, subject=f"person{n}")
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    assert main(["projections", "rebuild", "--verify", "--json"]) == 0
    assert main(["ledger", "verify"]) == 0
    assert main(["replay", "snapshot", "--every", "10"]) == 0
    assert main(["asof", "now", "--verify"]) == 0
    assert main(["asof", "now", "--verify", "--no-snapshots", "--valid-at", "0001-01-02"]) == 0
    capsys.readouterr()
    assert main(["projections", "status", "--json"]) == 0
    statuses = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in statuses if s["error"] or s["lag"]] == []


def knowledge_with(suffix: str) -> Poison:
    """A published document's title, tags and every chunk's heading and text end in ``suffix``."""

    def poison(event: Event) -> Event:
        if not isinstance(event, KnowledgePublished):
            return event
        chunks = tuple(
            msgspec.structs.replace(c, heading=c.heading + suffix, text=c.text + suffix) for c in event.chunks
        )
        return msgspec.structs.replace(
            event, title=event.title + suffix, tags=(f"on{suffix}call",), chunks=chunks
        )

    return poison


def test_a_knowledge_document_with_text_an_older_version_accepted_projects(settings: Settings) -> None:
    owner = Identity("acme", "olga", "owner")
    document = "# On-call\n\nPage the secondary after fifteen minutes without an acknowledgement.\n"
    with Runtime(settings, follow=False) as old, appended_as_poisoned(old.ledger, knowledge_with(NUL)):
        knowledge = KnowledgeService(old.ledger, HashEmbedder(), old.core.governance.write_policy)
        assert knowledge.publish(owner, document, "oncall.md", NAMESPACE).outcome == "published"
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        api = Api(runtime, client)
        agent = api.key(NAMESPACE, "agent-2", "agent")
        at_head(api)
        fault = api.mem(
            agent, "fault", {"question": "When is the secondary paged without an acknowledgement?"}
        )
        assert fault.status_code == 200, fault.text
        assert fault.json()["source"] == "L3"
        assert fault.json()["blocks"][0]["title"] == f"On-call{REPLACEMENT}"
        rebuilt_and_verified(runtime)
        admin = api.key(NAMESPACE, "lead", "admin")
        forget = api.mem(admin, "forget", {"subtree": "", "reason": "retired runbooks"})
        assert forget.status_code == 200, forget.text
        assert len(forget.json()["certificate"]["erased_documents"]) == 1
        at_head(api)
        rebuilt_and_verified(runtime)
        assert client.get("/readyz").status_code == 200


def test_a_reaffirmation_whose_provenance_an_older_version_accepted_projects(settings: Settings) -> None:
    """An identical later write joins its provenance to the memory (MemoryReaffirmed)."""

    def poison(event: Event) -> Event:
        if isinstance(event, MemoryReaffirmed) and event.provenance is not None:
            return msgspec.structs.replace(
                event, provenance=msgspec.structs.replace(event.provenance, ref=f"doc{NUL}")
            )
        return event

    fact = WriteMemory(
        content="The deploy window is Tuesday", provenance=ProvenanceClaim(source="document", ref="a")
    )
    with Runtime(settings, follow=False) as old:
        first = old.memory.write(AGENT, fact)
        with appended_as_poisoned(old.ledger, poison):
            again = old.memory.write(Identity(NAMESPACE, "agent-3", "agent"), fact)
    assert again.outcome == "deduplicated"
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        api = Api(runtime, client)
        agent = api.key(NAMESPACE, "agent-2", "agent")
        at_head(api)
        read = api.mem(agent, "read", {"id": str(first.id)})
        assert read.status_code == 200, read.text
        assert [p["ref"] for p in read.json()["provenance"]] == ["a", f"doc{REPLACEMENT}"]
        rebuilt_and_verified(runtime)
        at_head(api)
        assert client.get("/readyz").status_code == 200
