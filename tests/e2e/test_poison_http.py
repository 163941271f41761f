"""Poison over HTTP: text PostgreSQL cannot store, invisible characters, times outside
years 1-9999 in UTC, deep JSON and huge bodies. Every one is a 4xx naming the field
(never a 500, never a write), the audit record of the refusal never copies the caller's
text raw, and afterwards every projection still follows the ledger (/readyz is 200)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memwarden.api.cli.main import main
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import AuditRecorded, KeyIssued, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.services.knowledge import KnowledgeService
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from tests.e2e.api_helpers import Api

NUL = "nul \u0000 here"
UUID0 = "00000000-0000-0000-0000-000000000000"
FACT = "The deploy service runs on Kubernetes in eu-west-1"


@pytest.fixture(autouse=True)
def _hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")


def _poisoned_calls() -> list[tuple[str, str, str, dict[str, Any], str]]:
    """(role, method, path, body, the field the answer must name)."""
    return [
        ("agent", "POST", "/v1/mem/write", {"content": NUL}, "content"),
        ("agent", "POST", "/v1/mem/write", {"content": FACT, "tags": ["ok", NUL]}, "tags[1]"),
        ("agent", "POST", "/v1/mem/write", {"content": FACT, "selectors": [NUL]}, "selectors[0]"),
        (
            "agent",
            "POST",
            "/v1/mem/write",
            {"content": FACT, "subject": NUL, "attribute": "primary", "value": "x"},
            "subject",
        ),
        ("agent", "POST", "/v1/mem/write", {"content": FACT, "provenance": {"ref": NUL}}, "provenance.ref"),
        ("agent", "POST", "/v1/mem/verify", {"id": UUID0, "supports": True, "note": NUL}, "note"),
        ("agent", "POST", "/v1/mem/search", {"query": NUL}, "query"),
        ("agent", "POST", "/v1/mem/search", {"query": "deploy", "tags": [NUL]}, "tags[0]"),
        ("agent", "POST", "/v1/mem/fault", {"question": NUL}, "question"),
        ("agent", "POST", "/v1/mem/assemble", {"budget_tokens": 100, "task_hint": NUL}, "task_hint"),
        ("agent", "POST", "/v1/mem/policy_ack", {"directive_id": NUL}, "directive_id"),
        ("admin", "POST", "/v1/mem/share", {"id": UUID0, "with": NUL}, "with"),
        ("admin", "POST", "/v1/mem/forget", {"subtree": ".", "reason": NUL}, "reason"),
        ("admin", "POST", "/v1/admin/keys", {"target": "acme/eng", "actor": NUL, "role": "agent"}, "actor"),
        (
            "admin",
            "PUT",
            "/v1/admin/policies/acme/eng",
            {"directives": [{"id": "d1", "text": NUL}]},
            "directives[0].text",
        ),
        (
            "admin",
            "POST",
            f"/v1/admin/disputes/{UUID0}/resolve",
            {"decision": "edit", "content": NUL},
            "content",
        ),
        (
            "admin",
            "POST",
            "/v1/admin/keys",
            {"target": "acme/eng", "actor": "x", "role": "agent", "max_provenance": NUL},
            "max_provenance",
        ),
        ("auditor", "POST", "/v1/compliance/checkpoints/1/cosignatures", {"cosignature": NUL}, "cosignature"),
        ("auditor", "POST", "/v1/compliance/asof", {"as_of": "2026-03-01", "query": NUL}, "query"),
        ("auditor", "POST", "/v1/compliance/asof", {"as_of": "2026-03-01", "target": NUL}, "target"),
    ]


def _keys(api: Api) -> dict[str, str]:
    return {
        "agent": api.key("acme/eng", "bot", "agent"),
        "admin": api.key("acme", "boss", "admin"),
        "auditor": api.key("acme", "audrey", "auditor"),
    }


def _assert_still_healthy(api: Api) -> None:
    """Every projection applied every record the refusals left (the audit projection too)."""
    api.settle()
    ready = api.client.get("/readyz")
    assert ready.status_code == 200, ready.text
    for record in api.audit_records():
        assert "\x00" not in record.detail
        assert record.detail.isprintable(), record.detail


def test_poison_text_in_any_field_of_any_body_is_a_400_naming_the_field(api: Api) -> None:
    keys = _keys(api)
    for role, method, path, body, field in _poisoned_calls():
        response = api.call(keys[role], path, body, method=method)
        assert response.status_code == 400, (path, field, response.text)
        answer = response.json()
        assert answer["error"] == "invalid_request", (path, answer)
        assert answer["detail"].startswith(f"{field} contains a NUL character"), (path, answer)
    assert not [r for r in api.runtime.ledger.read(0, 10_000) if isinstance(r.event, MemoryWritten)]
    _assert_still_healthy(api)


def test_a_lone_surrogate_escape_in_json_is_a_400_naming_the_field(api: Api) -> None:
    agent = _keys(api)["agent"]
    for raw, named in (
        (b'{"content": "x \\ud800 y"}', "content contains a lone surrogate (U+D800)"),
        (b'{"content": "ok", "tags": ["a", "\\udc00"]}', "tags[1] contains a lone surrogate (U+DC00)"),
        (b'{"content": "ok", "provenance": {"ref": "\\udbff"}}', "provenance.ref contains a lone surrogate"),
        (b'{"content": "x", "tags": ["\\ud800"', "malformed JSON"),  # truncated: no field to name
    ):
        response = api.client.post(
            "/v1/mem/write",
            content=raw,
            headers={"Authorization": f"Bearer {agent}", "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert response.json()["error"] == "invalid_request"
        assert response.json()["detail"].startswith(named), response.json()
    _assert_still_healthy(api)


def test_a_refused_unknown_field_named_with_a_nul_never_reaches_the_audit_raw(api: Api) -> None:
    keys = _keys(api)
    response = api.mem(keys["agent"], "read", {"id": UUID0, "\u0000": 1})
    assert response.status_code == 400, response.text
    assert "a field name in the body contains a NUL character" in response.json()["detail"]
    unknown = api.mem(keys["agent"], "read", {"id": UUID0, "evil\u0001field": 1})
    assert unknown.status_code == 400
    assert "\\x01" in unknown.json()["detail"]  # quoted, escaped: not the raw control character
    _assert_still_healthy(api)
    audit = api.call(keys["auditor"], "/v1/compliance/audit", method="GET", params={"op": "read"})
    assert audit.status_code == 200, audit.text
    details = [r["detail"] for r in audit.json()["items"]]
    assert any("\\x01" in d for d in details), details


def test_poison_in_the_query_string_is_a_400_naming_the_parameter(api: Api) -> None:
    auditor = _keys(api)["auditor"]
    for params, named in (
        ({"actor": NUL}, "query parameter actor contains a NUL character"),
        ({"op": "read\u0000"}, "query parameter op contains a NUL character"),
        ({"\u0000": "x"}, "a query parameter's name contains a NUL character"),
        ({"\u0001sneaky": "x"}, "unknown query parameter '\\x01sneaky'"),
    ):
        response = api.call(auditor, "/v1/compliance/audit", method="GET", params=params)
        assert response.status_code == 400, (params, response.text)
        assert named in response.json()["detail"], response.json()
    headers = {"Authorization": f"Bearer {auditor}"}
    for raw_query in ("actor=%ED%A0%80", "actor=%FF%FE", "op=%00"):
        answer = api.client.get(f"/v1/compliance/audit?{raw_query}", headers=headers)
        assert answer.status_code in {200, 400}, (raw_query, answer.text)
    admin = _keys(api)["admin"]
    for path in ("/v1/admin/policies/acme%00x", "/v1/admin/policies/acme/%2E%2E"):
        answer = api.call(admin, path, method="GET")
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["detail"].isprintable()
    replaced = api.call(admin, "/v1/admin/policies/acme/%ED%A0%80", method="GET")
    assert replaced.status_code == 200  # undecodable bytes arrive as U+FFFD: storable
    assert replaced.json()["namespace"] == "acme/\ufffd\ufffd\ufffd"
    _assert_still_healthy(api)


def test_a_deeply_nested_body_is_a_400_never_a_500(api: Api) -> None:
    agent = _keys(api)["agent"]
    headers = {"Authorization": f"Bearer {agent}", "Content-Type": "application/json"}
    thousand = b'{"content": "x", "tags": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    assert len(thousand) < 2100
    object_deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    just_over = b'{"content": "x", "tags": ' + b"[" * 32 + b"]" * 32 + b"}"
    for raw in (thousand, object_deep, just_over):
        response = api.client.post("/v1/mem/write", content=raw, headers=headers)
        assert response.status_code == 400, response.text
        assert "deeper than 32 levels" in response.json()["detail"]
    brackets_in_a_string = {"content": "[" * 2000 + " deploy notes " + "{" * 2000}
    stored = api.mem(agent, "write", brackets_in_a_string)
    assert stored.status_code == 200, stored.text
    assert stored.json()["outcome"] == "stored"
    _assert_still_healthy(api)


def test_a_body_over_the_size_limit_is_a_413(api: Api) -> None:
    agent = _keys(api)["agent"]
    huge = {"content": "x" * 1_100_000}  # the limit is 1 MiB
    response = api.mem(agent, "write", huge)
    assert response.status_code == 413, response.text
    assert response.json()["error"] == "too_large"


@pytest.mark.parametrize(
    ("role", "path", "body", "field"),
    [
        (
            "agent",
            "/v1/mem/write",
            {"content": FACT, "valid_from": "0001-01-01T00:00:00+01:00"},
            "valid_from",
        ),
        (
            "agent",
            "/v1/mem/write",
            {"content": FACT, "event_time": "9999-12-31T23:59:59-01:00"},
            "event_time",
        ),
        ("agent", "/v1/mem/read", {"id": UUID0, "as_of": "0001-01-01T00:30:00+01:00"}, "as_of"),
        ("agent", "/v1/mem/search", {"query": "deploy", "valid_at": "9999-12-31T23:00:00-02:00"}, "valid_at"),
        ("auditor", "/v1/compliance/asof", {"as_of": "0001-01-01T00:00:00+01:00"}, "as_of"),
        (
            "auditor",
            "/v1/compliance/asof",
            {"as_of": "2026-03-01", "valid_at": "9999-12-31T23:59:59-01:00"},
            "valid_at",
        ),
        ("auditor", "/v1/compliance/asof", {"as_of": "2026-13-01"}, "as_of"),
        ("auditor", "/v1/compliance/asof", {"as_of": "2026-03-01T10:00:00"}, "as_of"),
    ],
)
def test_a_time_outside_years_1_to_9999_in_utc_is_a_400_naming_the_field(
    api: Api, role: str, path: str, body: dict[str, Any], field: str
) -> None:
    response = api.call(_keys(api)[role], path, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert response.json()["detail"].startswith(field), response.json()
    _assert_still_healthy(api)


def test_compliance_times_take_a_bare_date_as_midnight_utc(api: Api) -> None:
    keys = _keys(api)
    assert api.mem(keys["agent"], "write", {"content": FACT}).status_code == 200
    api.settle()
    dated = api.call(
        keys["auditor"], "/v1/compliance/asof", {"as_of": "2999-03-01", "valid_at": "2999-03-01"}
    )
    assert dated.status_code == 200, dated.text
    assert dated.json()["as_of"] == "2999-03-01T00:00:00Z"
    assert [m["content"] for m in dated.json()["memories"]] == [FACT]
    before = api.call(keys["auditor"], "/v1/compliance/asof", {"as_of": "2000-01-01"})
    assert before.status_code == 200, before.text
    assert before.json()["memories"] == []
    for params in ({"since": "2000-01-01"}, {"since": "2000-01-01T00:00:00Z", "until": "2999-01-01"}):
        audit = api.call(keys["auditor"], "/v1/compliance/audit", method="GET", params=params)
        assert audit.status_code == 200, audit.text
        assert audit.json()["items"]
    late = api.call(keys["auditor"], "/v1/compliance/audit", method="GET", params={"since": "2999-01-01"})
    assert late.json()["items"] == []
    bad = api.call(keys["auditor"], "/v1/compliance/audit", method="GET", params={"until": "yesterday"})
    assert bad.status_code == 400
    assert bad.json()["detail"].startswith("until is not a time")


LOOK_ALIKES = [
    # default-ignorable code points that are not control or format characters
    "db\ufe0f-host",  # variation selector 16
    "db\ufe00-host",  # variation selector 1
    "d\u034fb-host",  # combining grapheme joiner
    "db\u180b-host",  # Mongolian free variation selector
    "db-host\U000e0100",  # variation selector 17
    "db\u2065-host",  # unassigned, default ignorable
    # confusable letters (UTS #39)
    "db-h\u043est",  # Cyrillic o
    "\u0501b-host",  # Cyrillic komi de
    "db-ho\u0455t",  # Cyrillic dze
]


@pytest.mark.parametrize(
    "subject", ["db\u200b-host", "pri\u00admary", "db\u2010host", "DB-HOST", "\ufeffdb-host", *LOOK_ALIKES]
)
def test_a_lower_trust_write_to_an_invisibly_respelled_slot_is_disputed(api: Api, subject: str) -> None:
    keys = _keys(api)
    manual = {
        "content": "The primary database host is db1",
        "subject": "db-host",
        "attribute": "primary",
        "value": "db1",
        "provenance": {"source": "manual"},
    }
    # the admin key lives at acme; the slot is the agent's own namespace, so write as a member there
    member = api.key("acme/eng", "dana", "member")
    assert api.mem(member, "write", manual).json()["outcome"] == "stored"
    respelled_subject, respelled_attribute = (
        ("db-host", subject) if subject == "pri\u00admary" else (subject, "primary")
    )
    sneaky = {
        "content": "The primary database host is db9",
        "subject": respelled_subject,
        "attribute": respelled_attribute,
        "value": "db9",
    }
    answer = api.mem(keys["agent"], "write", sneaky)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "disputed", answer.json()


def test_content_of_only_invisible_fillers_is_low_information(api: Api) -> None:
    agent = _keys(api)["agent"]
    for content in ("\u3164\u115f\u1160", "\u200b\u200b\u200bok\u00ad", "\uffa0" * 50):
        answer = api.mem(agent, "write", {"content": content})
        assert answer.status_code == 200, answer.text
        assert answer.json()["outcome"] == "rejected"
        assert [r["reason"] for r in answer.json()["rejected"]] == ["low_information"]


@pytest.mark.parametrize(
    "attribute", ["addr\u0435ss", "\u0430ddress", "addres\u0455", "addr\ufe0fess", "addr\u034fess"]
)
def test_a_look_alike_attribute_never_opens_a_parallel_slot(api: Api, attribute: str) -> None:
    keys = _keys(api)
    member = api.key("acme/eng", "dana", "member")
    incumbent = {
        "content": "Dana lives at 12 Main Street",
        "subject": "dana",
        "attribute": "address",
        "value": "12 Main Street",
        "provenance": {"source": "manual"},
    }
    assert api.mem(member, "write", incumbent).json()["outcome"] == "stored"
    sneaky = {
        "content": "Dana lives at 9 Elm Road",
        "subject": "dana",
        "attribute": attribute,
        "value": "9 Elm Road",
    }
    answer = api.mem(keys["agent"], "write", sneaky)
    assert answer.status_code == 200, answer.text
    assert answer.json()["outcome"] == "disputed", answer.json()
    found = api.mem(keys["agent"], "search", {"query": "Dana lives at"}).json()["results"]
    assert [hit["content"] for hit in found] == ["Dana lives at 12 Main Street"]


def test_content_with_a_grapheme_joiner_inside_is_deduplicated(api: Api) -> None:
    agent = _keys(api)["agent"]
    first = api.mem(agent, "write", {"content": FACT}).json()
    again = api.mem(agent, "write", {"content": FACT.replace("Kubernetes", "Kuber\u034fnetes")}).json()
    assert again["outcome"] == "deduplicated", again
    assert again["id"] == first["id"]


@pytest.mark.parametrize(
    "target", ["acme/hr/\u200b", "acme/hr/bots\u200b", "acme/hr/bots\ufe0f", "\u0430cme/hr"]
)
def test_namespaces_that_look_like_others_are_refused(api: Api, target: str) -> None:
    owner = api.key("acme", "olga", "owner")
    minted = api.call(owner, "/v1/admin/keys", {"target": target, "actor": "x", "role": "agent"})
    assert minted.status_code == 400, minted.text
    policy = api.client.put(
        f"/v1/admin/policies/{target}",
        json={"forbid_secrets": True},
        headers={"Authorization": f"Bearer {owner}"},
    )
    assert policy.status_code in {400, 404}, policy.text
    assert policy.status_code != 200


@pytest.mark.parametrize("target", ["acme/./eng", "acme/..", "acme/eng/.", "acme//eng"])
def test_path_operators_and_empty_segments_are_never_namespaces(api: Api, target: str) -> None:
    keys = _keys(api)
    admin = keys["admin"]
    minted = api.call(admin, "/v1/admin/keys", {"target": target, "actor": "x", "role": "agent"})
    assert minted.status_code == 400, minted.text
    shared = api.mem(admin, "share", {"id": UUID0, "with": target})
    assert shared.status_code == 400, shared.text
    asof = api.call(keys["auditor"], "/v1/compliance/asof", {"as_of": "2026-03-01", "target": target})
    assert asof.status_code == 400, asof.text


def test_no_way_around_the_edge_appends_poison(api: Api) -> None:
    """The services called in-process (as the CLI, import and knowledge load do) refuse it
    too; afterwards every projection rebuilds from the ledger and finds nothing to refuse."""
    core = api.runtime.core
    writer = Identity("acme/eng", "bot", "agent")
    owner = Identity("acme", "boss", "owner")
    for command in (
        WriteMemory(content=NUL),
        WriteMemory(content="lone \ud800 surrogate in the content"),
        WriteMemory(content=FACT, tags=("\udcff",)),
        WriteMemory(content=FACT, valid_from=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))),
    ):
        result = core.memory.write(writer, command)
        assert result.outcome == "rejected", command
        assert [r.reason for r in result.rejected] == ["unstorable"]
    with pytest.raises(InvalidRequest, match="actor contains a lone surrogate"):
        core.governance.issue_key(owner, IssueKey(target="acme/eng", actor="b\udcffot", role="agent"))
    knowledge = KnowledgeService(api.runtime.ledger, None, core.governance.write_policy)
    for text, name in (
        ("# Runbook\n\nRestart \u0000 it", "a.md"),
        ("# Runbook\n\nRestart \ud800", "b\udcff.md"),
    ):
        published = knowledge.publish(owner, text, name)
        assert published.outcome == "rejected", published
    assert all(isinstance(r.event, AuditRecorded) for r in api.runtime.ledger.read(0, 10_000))
    _assert_still_healthy(api)
    rebuilder = Rebuilder(api.runtime.reads.runner)
    for projection in api.runtime.reads.runner.projections:
        assert rebuilder.rebuild(projection.name).events > 0


def test_the_cli_refuses_poison_from_its_arguments(
    monkeypatch: pytest.MonkeyPatch, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """Arguments carry undecodable bytes as lone surrogates (surrogateescape): each command
    refuses them with a message and an exit code, never a traceback, and appends nothing."""
    monkeypatch.setenv("DATABASE_URL", settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(settings.data_dir))
    bad = b"b\xffot".decode("utf-8", "surrogateescape")
    for argv, exit_code, message in (
        (["keys", "create", "acme/eng", bad, "agent"], 1, "actor contains a lone surrogate"),
        (["keys", "create", f"acme/{bad}", "bot", "agent"], 1, "namespace contains a lone surrogate"),
        (["keys", "create", "acme/./eng", "bot", "agent"], 1, "path operator"),
        (["keys", "revoke", bad], 1, "KEY_ID contains a lone surrogate"),
        (["keys", "list", "--namespace", f"acme/{bad}"], 1, "namespace contains a lone surrogate"),
        (["asof", "2026-03-01", "--query", bad], 2, "--query contains a lone surrogate"),
        (["knowledge", "load", str(settings.data_dir), "--as", f"acme/{bad}"], 2, "--as contains a lone"),
    ):
        assert main(argv) == exit_code, argv
        assert message in capsys.readouterr().err, argv
    for argv, problem in (
        (["asof", "0001-01-01T00:00:00+01:00"], "is outside years 1-9999 once converted to UTC"),
        (["asof", "2026-03-01T10:00:00"], "has no time zone"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert f"argument time: '{argv[1]}' {problem}" in capsys.readouterr().err
    with Runtime(settings, follow=False) as runtime:
        assert not [r for r in runtime.ledger.read(0, 1000) if isinstance(r.event, KeyIssued)]
