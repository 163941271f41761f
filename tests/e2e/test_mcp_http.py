"""MCP over streamable HTTP at /mcp, driven by the official ``mcp`` client against the app
served by uvicorn: the same key, gate, rate limit and audit as the HTTP syscalls."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator

import anyio
import httpx
import pytest
from mcp import Client

from memwarden.api.http.body import IDENTITY_FIELDS
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import audit_records, issue_key
from tests.e2e.mcp_helpers import mcp_client, payload, served_app

Served = tuple[Runtime, str]


@pytest.fixture
def served(settings: Settings) -> Iterator[Served]:
    with Runtime(settings) as runtime, served_app(runtime) as base:
        yield runtime, base


def run(base: str, key: str | None, scenario: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with mcp_client(base, key) as client:
            await scenario(client)

    anyio.run(main)


def test_every_syscall_is_a_tool_and_no_schema_names_an_identity(served: Served) -> None:
    runtime, base = served
    key = issue_key(runtime, "acme/eng", "olga", "owner")
    syscalls = {
        "write", "write_batch", "write_status", "read", "search", "assemble", "fault", "history",
        "verify", "pin", "unpin", "stats", "policy", "policy_ack", "share", "forget", "prove",
    }  # fmt: skip

    async def scenario(client: Client) -> None:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == syscalls
        for tool in tools:
            assert tool.description
            assert len(tool.description) > 40
            named: set[str] = set()
            pending = [tool.input_schema]
            while pending:
                schema = pending.pop()
                if isinstance(schema, dict):
                    named.update(schema.get("properties", {}))
                    pending.extend(schema.values())
                elif isinstance(schema, list):
                    pending.extend(schema)
            assert not named & IDENTITY_FIELDS, (tool.name, named & IDENTITY_FIELDS)

    run(base, key, scenario)


def test_a_key_is_offered_only_the_tools_its_role_may_call(served: Served) -> None:
    runtime, base = served
    offered: dict[str, set[str]] = {}
    for role in ("agent", "member", "auditor", "admin"):
        key = issue_key(runtime, "acme/eng", f"who-{role}", role)

        async def scenario(client: Client, role: str = role) -> None:
            offered[role] = {t.name for t in (await client.list_tools()).tools}

        run(base, key, scenario)
    assert {"forget", "share"}.isdisjoint(offered["agent"])
    assert "write" in offered["agent"]
    assert "forget" in offered["member"]
    assert "share" not in offered["member"]
    assert {"share", "forget"} <= offered["admin"]
    assert "write" not in offered["auditor"]
    assert {"read", "search", "stats"} <= offered["auditor"]


def test_tools_carry_their_annotations_and_typed_batch_items(served: Served) -> None:
    runtime, base = served
    key = issue_key(runtime, "acme/eng", "olga", "owner")

    async def scenario(client: Client) -> None:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        hints = {
            name: (a.read_only_hint, a.destructive_hint, a.idempotent_hint) if a is not None else None
            for name, a in ((name, t.annotations) for name, t in tools.items())
        }
        assert None not in hints.values()
        assert hints["forget"] == (False, True, True)
        for name in ("read", "search", "history", "stats", "policy", "write_status"):
            assert hints[name] == (True, False, True), name
        assert hints["write"] == (False, False, False)
        assert hints["pin"] == (False, False, True)
        batch = tools["write_batch"].input_schema
        item_ref = batch["properties"]["items"]["items"]["$ref"]
        item = batch["$defs"][item_ref.rsplit("/", 1)[-1]]
        assert item["type"] == "object"
        assert "content" in item["required"]
        assert {"content", "subject", "attribute", "provenance"} <= set(item["properties"])
        assert "async" not in item["properties"]

    run(base, key, scenario)


def test_write_search_assemble_and_the_audit_record_of_a_tool_call(served: Served) -> None:
    runtime, base = served
    key = issue_key(runtime, "acme/eng", "bot", "agent")

    async def scenario(client: Client) -> None:
        written = await client.call_tool("write", {"content": "The deploy window is Tuesday 14:00 UTC"})
        assert not written.is_error, payload(written)
        assert payload(written)["outcome"] == "stored"
        assert written.structured_content == payload(written)
        found = await client.call_tool("search", {"query": "deploy window"})
        assert [r["id"] for r in payload(found)["results"]][:1] == [payload(written)["id"]]
        capsule = await client.call_tool("assemble", {"budget_tokens": 200, "task_hint": "deploy"})
        assert any("Tuesday" in b["content"] for b in payload(capsule)["blocks"])
        stats = await client.call_tool("stats", {})
        assert payload(stats)["namespace"] == "acme/eng"
        assert payload(stats)["current"] == 1

    run(base, key, scenario)
    by_op = {(a.op, a.outcome, a.actor, a.namespace) for a in audit_records(runtime)}
    for op in ("write", "search", "assemble", "stats"):
        assert (op, "ok", "bot", "acme/eng") in by_op


def test_another_tenants_key_sees_nothing(served: Served) -> None:
    runtime, base = served
    ours = issue_key(runtime, "acme/eng", "bot", "agent")
    theirs = issue_key(runtime, "globex/eng", "spy", "agent")
    written: dict[str, str] = {}

    async def write(client: Client) -> None:
        result = await client.call_tool("write", {"content": "Acme's launch code name is Bluebird"})
        written["id"] = payload(result)["id"]

    async def snoop(client: Client) -> None:
        found = await client.call_tool("search", {"query": "launch code name Bluebird"})
        assert not found.is_error
        assert payload(found)["results"] == []
        read = await client.call_tool("read", {"id": written["id"]})
        assert read.is_error
        assert payload(read)["error"] == "not_found"
        history = await client.call_tool("history", {"id": written["id"]})
        assert payload(history)["error"] == "not_found"
        capsule = await client.call_tool("assemble", {"budget_tokens": 500, "task_hint": "launch"})
        assert all("Bluebird" not in b["content"] for b in payload(capsule)["blocks"])

    run(base, ours, write)
    runtime.reads.wait_for(runtime.ledger.head_position())
    run(base, theirs, snoop)
    assert ("read", "miss", "spy") in {(a.op, a.outcome, a.actor) for a in audit_records(runtime)}


@pytest.mark.parametrize(
    ("arguments", "code", "names"),
    [
        ({"content": "a\x00b"}, "invalid_request", "content"),
        ({"content": "fine", "namespace": "globex"}, "identity_in_body", "namespace"),
        (
            {"content": "fine", "provenance": {"source": "conversation", "actor": "ceo"}},
            "identity_in_body",
            "actor",
        ),
        ({"content": "fine", "event_time": "10000-01-01T00:00:00Z"}, "invalid_request", "event_time"),
        (
            {
                "content": "fine",
                "tags": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
            },
            "invalid_request",
            "deeper",
        ),
        ({"content": 12}, "invalid_request", "str"),
        ({"bogus": 1, "content": "fine"}, "invalid_request", "bogus"),
    ],
)
def test_poison_arguments_are_a_clear_tool_error_and_audited(
    served: Served, arguments: dict[str, object], code: str, names: str
) -> None:
    runtime, base = served
    key = issue_key(runtime, "acme/eng", "bot", "agent")

    async def scenario(client: Client) -> None:
        result = await client.call_tool("write", arguments)
        assert result.is_error
        error = payload(result)
        assert error["error"] == code, error
        assert names in error["detail"]
        assert "\x00" not in error["detail"]
        assert "\ud800" not in error["detail"]
        after = await client.call_tool("stats", {})  # the server is fine afterwards
        assert payload(after)["current"] == 0

    run(base, key, scenario)
    refused = [a for a in audit_records(runtime) if a.op == "write"]
    assert len(refused) == 1
    assert refused[0].outcome == "denied"
    assert "\x00" not in refused[0].detail


MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def raw_tool_call(base: str, key: str, arguments_json: str, version: str = MODERN) -> httpx.Response:
    """A ``tools/call`` of ``write`` whose arguments are JSON text as given (the mcp client
    cannot even encode a lone surrogate; a raw client can send its escape), in the current
    protocol (one self-contained POST) or a handshake-era one."""
    meta = f', "_meta": {json.dumps(META)}' if version == MODERN else ""
    body = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "write", "arguments": '
        + arguments_json
        + meta
        + "}}"
    )
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Protocol-Version": version,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "write",
    }
    return httpx.post(f"{base}/mcp", content=body.encode(), headers=headers, timeout=10)


def test_a_lone_surrogate_escape_is_refused_naming_its_field(served: Served) -> None:
    runtime, base = served
    key = issue_key(runtime, "acme/eng", "bot", "agent")
    fine = raw_tool_call(base, key, '{"content": "a fine fact about lunch"}')
    assert fine.status_code == 200, fine.text
    assert fine.json()["result"]["isError"] is False
    poisoned = raw_tool_call(base, key, '{"content": "fine", "subject": "x\\ud800y"}')
    assert poisoned.status_code == 200, poisoned.text
    result = poisoned.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"] == "invalid_request"
    assert "subject" in result["structuredContent"]["detail"]
    assert "\\ud800" not in poisoned.text
    # a handshake-era request: the SDK's parser refuses the escape before any tool runs
    legacy = raw_tool_call(base, key, '{"content": "fine", "subject": "x\\ud800y"}', "2025-06-18")
    assert legacy.status_code == 400
    assert legacy.json()["error"]["code"] == -32700
    after = raw_tool_call(base, key, '{"content": "another fine fact about dinner"}')
    assert after.json()["result"]["isError"] is False
    writes = [a for a in audit_records(runtime) if a.op == "write"]
    assert [a.outcome for a in writes] == ["ok", "denied", "ok"]


def test_unknown_tool_and_a_role_that_may_not_write(served: Served) -> None:
    runtime, base = served
    auditor = issue_key(runtime, "acme", "dana", "auditor")

    async def scenario(client: Client) -> None:
        unknown = await client.call_tool("drop_tables", {})
        assert unknown.is_error
        assert payload(unknown)["error"] == "invalid_request"
        refused = await client.call_tool("write", {"content": "auditors do not write"})
        assert payload(refused)["error"] == "forbidden"
        allowed = await client.call_tool("search", {"query": "anything"})
        assert not allowed.is_error

    run(base, auditor, scenario)
    assert ("write", "denied", "dana") in {(a.op, a.outcome, a.actor) for a in audit_records(runtime)}


def test_the_rate_limit_applies_to_tool_calls(served: Served) -> None:
    runtime, base = served
    runtime.core.governance.set_policy(
        Identity("acme", "operator@test", "owner"), "acme", PolicyBody(rate_limit_per_minute=3)
    )
    key = issue_key(runtime, "acme/eng", "bot", "agent")

    async def scenario(client: Client) -> None:
        answers = [await client.call_tool("stats", {}) for _ in range(5)]
        errors = [payload(a) for a in answers if a.is_error]
        assert errors, "the bucket of 3 a minute never ran out"
        assert errors[0]["error"] == "rate_limited"
        assert int(errors[0]["retry_after"]) >= 1

    run(base, key, scenario)
    assert ("stats", "denied") in {(a.op, a.outcome) for a in audit_records(runtime)}


def test_no_key_or_a_revoked_key_gets_401_before_any_tool(served: Served) -> None:
    runtime, base = served
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {},
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    anonymous = httpx.post(f"{base}/mcp", json=initialize, headers=headers, timeout=10)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"] == "unauthenticated"
    forged = httpx.post(
        f"{base}/mcp",
        json=initialize,
        headers={**headers, "Authorization": "Bearer mw_nope_nope"},
        timeout=10,
    )
    assert forged.status_code == 401
    assert [(a.op, a.outcome, a.actor) for a in audit_records(runtime)] == [
        ("mcp", "denied", "anonymous")
    ] * 2
