"""One time-travel contract over HTTP, MCP and the CLI's parser: the same accepted forms
(``now``, RFC 3339, a bare date), the shape of a plain read with the instants added, and
"exists but not valid then" (404 ``not_valid_then``) told apart from "no such memory"
(404 ``not_found``) without telling a caller outside the memory's scope anything."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.api.cli.timetravel import parse_time
from memwarden.domain.model.times import parse_time_text
from tests.e2e.api_helpers import Api
from tests.e2e.mcp_helpers import mcp_client, payload, served_app

INSTANTS = {"as_of", "valid_at", "position"}


def _write(api: Api, key: str, content: str, **fields: object) -> str:
    answer = api.mem(key, "write", {"content": content, **fields})
    assert answer.status_code == 200, answer.text
    memory_id: str = answer.json()["id"]
    return memory_id


def test_a_read_back_in_time_has_the_plain_reads_shape_plus_its_instants(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    memory_id = _write(
        api,
        agent,
        "The staging database is rebuilt every Sunday night",
        subject="staging",
        attribute="rebuild",
        tags=["ops"],
    )
    plain = api.mem(agent, "read", {"id": memory_id}).json()
    for as_of in (
        "now",
        datetime.now(UTC).isoformat(),
        (datetime.now(UTC) + timedelta(days=1)).date().isoformat(),
    ):
        answer = api.mem(agent, "read", {"id": memory_id, "as_of": as_of})
        assert answer.status_code == 200, (as_of, answer.text)
        then = answer.json()
        assert set(then) == set(plain) | INSTANTS, as_of
        assert {k: v for k, v in then.items() if k not in INSTANTS} == plain
        assert then["position"] >= 1
    valid_now = api.mem(agent, "read", {"id": memory_id, "valid_at": "now"}).json()
    assert valid_now["subject"] == "staging"
    assert valid_now["tags"] == ["ops"]
    assert valid_now["provenance"] == plain["provenance"]
    assert valid_now["valid_at"] is not None


def test_not_valid_then_is_told_apart_from_no_such_memory_within_scope_only(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    outsider = api.key("acme/sales", "eve", "agent")
    memory_id = _write(
        api,
        agent,
        "Dana moved to Lisbon in March",
        event_time="2026-03-01T00:00:00Z",
        valid_from="2026-03-01T00:00:00Z",
    )
    before_validity = api.mem(agent, "read", {"id": memory_id, "valid_at": "2026-01-15"})
    assert before_validity.status_code == 404
    assert before_validity.json()["error"] == "not_valid_then"
    assert "2026-03-01" in before_validity.json()["detail"]
    before_recorded = api.mem(agent, "read", {"id": memory_id, "as_of": "2020-01-01"})
    assert before_recorded.status_code == 404
    assert before_recorded.json()["error"] == "not_valid_then"
    missing = api.mem(agent, "read", {"id": "00000000-0000-4000-8000-000000000001", "as_of": "now"})
    assert missing.json()["error"] == "not_found"
    unknown = "00000000-0000-4000-8000-000000000001"
    for body in ({"as_of": "now"}, {"valid_at": "2026-01-15"}, {"as_of": "2020-01-01"}):
        hidden = api.mem(outsider, "read", {"id": memory_id, **body})
        absent = api.mem(outsider, "read", {"id": unknown, **body})
        assert hidden.status_code == absent.status_code == 404
        assert hidden.json()["error"] == absent.json()["error"] == "not_found"
        assert hidden.json()["detail"].replace(memory_id, "?") == absent.json()["detail"].replace(
            unknown, "?"
        )


def test_search_and_the_compliance_route_take_the_same_forms(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    auditor = api.key("acme", "audrey", "auditor")
    _write(api, agent, "The release train leaves every second Thursday")
    for form in ("now", datetime.now(UTC).isoformat(), "2999-01-01"):
        found = api.mem(agent, "search", {"query": "release train", "as_of": form, "valid_at": form})
        assert found.status_code == 200, (form, found.text)
        asof = api.call(auditor, "/v1/compliance/asof", {"as_of": form})
        assert asof.status_code == 200, (form, asof.text)
    for bad in ("yesterday", "2026-01-01T00:00:00", ""):
        refused = api.mem(agent, "read", {"id": "00000000-0000-4000-8000-000000000001", "as_of": bad})
        assert refused.status_code == 400, bad
        assert refused.json()["error"] == "invalid_request"
        assert "as_of" in refused.json()["detail"]


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2900, 1, 1), timezones=st.just(UTC)))
def test_the_cli_and_the_api_read_every_form_alike(moment: datetime) -> None:
    for text in (moment.isoformat(), moment.date().isoformat()):
        assert parse_time(text) == parse_time_text(text)
    assert abs(parse_time("now") - datetime.now(UTC)) < timedelta(seconds=5)
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("yesterday")


def test_mcp_read_answers_as_http_does(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    memory_id = _write(api, agent, "Backups are kept for thirty five days", valid_from="2026-03-01T00:00:00Z")
    http_then = api.mem(agent, "read", {"id": memory_id, "as_of": "now"}).json()
    http_not_then = api.mem(agent, "read", {"id": memory_id, "valid_at": "2026-01-01"}).json()

    async def main(base: str) -> None:
        async with mcp_client(base, agent) as client:
            then = payload(await client.call_tool("read", {"id": memory_id, "as_of": "now"}))
            assert set(then) == set(http_then)
            assert then["id"] == memory_id
            not_then = await client.call_tool("read", {"id": memory_id, "valid_at": "2026-01-01"})
            assert not_then.is_error
            assert payload(not_then)["error"] == http_not_then["error"] == "not_valid_then"

    with served_app(api.runtime) as base:
        anyio.run(main, base)
