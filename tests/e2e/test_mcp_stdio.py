"""``memwarden mcp`` as a real process, over stdio, with the official ``mcp`` client: on the
local database (the app in its own process) and against a served API (``MEMWARDEN_URL``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from memwarden.api.mcp.tools import TOOLS
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import audit_records, issue_key
from tests.e2e.mcp_helpers import payload, served_app

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings) as opened:
        yield opened


def environment(settings: Settings, key: str, url: str | None = None) -> dict[str, str]:
    env = {
        "PYTHONPATH": str(REPO_ROOT),
        "DATABASE_URL": settings.database_url or "",
        "MEMWARDEN_DATA_DIR": str(settings.data_dir),
        "MEMWARDEN_EMBEDDER": "hash",
        "MEMWARDEN_API_KEY": key,
    }
    if url is not None:
        env["MEMWARDEN_URL"] = url
    return env


def over_stdio(env: dict[str, str], scenario: Callable[[Client], Awaitable[None]]) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memwarden.api.cli.main", "mcp"], env=env, cwd=str(REPO_ROOT)
    )

    async def main() -> None:
        with anyio.fail_after(120):
            async with Client(params) as client:
                await scenario(client)

    anyio.run(main)


def audited(runtime: Runtime) -> set[tuple[str, str, str]]:
    return {(a.op, a.outcome, a.actor) for a in audit_records(runtime)}


def test_stdio_on_the_local_database(runtime: Runtime, settings: Settings) -> None:
    key = issue_key(runtime, "acme/eng", "bot", "agent")
    stranger = issue_key(runtime, "globex", "spy", "agent")
    seen: dict[str, str] = {}

    async def ours(client: Client) -> None:
        offered = {t.name for t in (await client.list_tools()).tools}
        # an agent is offered every tool its role may call: not share, forget or prove
        assert offered == {t.name for t in TOOLS} - {"share", "forget", "prove"}
        written = await client.call_tool("write", {"content": "Invoices are approved by Priya in finance"})
        assert not written.is_error, payload(written)
        seen["id"] = payload(written)["id"]
        found = await client.call_tool("search", {"query": "who approves invoices"})
        assert [r["id"] for r in payload(found)["results"]][:1] == [seen["id"]]
        poisoned = await client.call_tool("write", {"content": "nul \x00 inside"})
        assert poisoned.is_error
        assert payload(poisoned)["error"] == "invalid_request"

    async def theirs(client: Client) -> None:
        found = await client.call_tool("search", {"query": "who approves invoices"})
        assert payload(found)["results"] == []
        read = await client.call_tool("read", {"id": seen["id"]})
        assert payload(read)["error"] == "not_found"

    over_stdio(environment(settings, key), ours)
    over_stdio(environment(settings, stranger), theirs)
    trail = audited(runtime)
    assert {("write", "ok", "bot"), ("search", "ok", "bot"), ("write", "denied", "bot")} <= trail
    assert ("read", "miss", "spy") in trail


def test_stdio_against_a_served_api(runtime: Runtime, settings: Settings) -> None:
    key = issue_key(runtime, "acme/eng", "bot", "agent")

    async def scenario(client: Client) -> None:
        written = await client.call_tool("write", {"content": "The staging database is called kestrel"})
        assert payload(written)["outcome"] == "stored"
        identity = await client.call_tool("write", {"content": "x", "agent_id": "someone-else"})
        assert payload(identity)["error"] == "identity_in_body"

    with served_app(runtime) as base:
        over_stdio(environment(settings, key, url=base), scenario)
    assert ("write", "ok", "bot") in audited(runtime)


def test_stdio_reports_an_unreachable_server_as_a_tool_error(runtime: Runtime, settings: Settings) -> None:
    key = issue_key(runtime, "acme/eng", "bot", "agent")

    async def scenario(client: Client) -> None:
        answer = await client.call_tool("stats", {})
        assert answer.is_error
        assert payload(answer)["error"] == "unavailable"

    over_stdio(environment(settings, key, url="http://127.0.0.1:9"), scenario)


def test_stdio_without_a_key_exits_with_a_message(settings: Settings) -> None:
    env = {**os.environ, **environment(settings, "not-a-key")}
    done = subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", "mcp"],
        check=False,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "MEMWARDEN_API_KEY" in done.stderr
    assert done.stdout == ""
