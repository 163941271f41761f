"""The optional model drafter against a real local HTTP server (the judge's client): its
statement is used, every failure is ``DraftFailed`` with its reason; and the rules a
model's statement is held to, those of caller text."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from memwarden.domain.drafting import OpenAIDrafter, drafter_from_settings
from memwarden.domain.drafting.openai import MAX_INPUT_CHARS
from memwarden.domain.model.consolidation import MAX_PROPOSAL_CHARS, DraftFailed, drafted_text_problem, worded
from memwarden.domain.settings import Settings
from tests.local_http import LocalServer, send

STATEMENTS = ["Staging is rebuilt every Sunday night", "Every Sunday night staging is rebuilt"]


def completion(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def test_the_models_statement_is_the_draft() -> None:
    def respond(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, 200, completion('```json\n{"statement": "Staging is rebuilt on Sunday nights"}\n```'))

    with LocalServer(respond) as server:
        drafter = OpenAIDrafter(server.url, "drafter-model", api_key="sk-test")
        assert drafter.draft("near_duplicate", STATEMENTS) == "Staging is rebuilt on Sunday nights"
        path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "drafter-model"
    asked = body["messages"][1]["content"]
    assert "1. Staging is rebuilt every Sunday night" in asked
    assert "2. Every Sunday night staging is rebuilt" in asked
    assert "sk-test" not in repr(drafter)


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b"{}", "http_error"),
        (200, b"not json", "bad_answer"),
        (200, completion("Staging is rebuilt on Sundays"), "bad_answer"),  # not the JSON object
        (200, completion('{"text": "Staging is rebuilt on Sundays"}'), "bad_answer"),
        (200, completion('{"statement": "a\\ud800b"}'), "bad_answer"),  # a lone surrogate: no JSON text
        (200, json.dumps({"choices": []}).encode(), "bad_answer"),
    ],
)
def test_every_failure_is_draft_failed_with_its_reason(status: int, body: bytes, reason: str) -> None:
    with (
        LocalServer(lambda handler, _body: send(handler, status, body)) as server,
        pytest.raises(DraftFailed) as failed,
    ):
        OpenAIDrafter(server.url, "m", timeout=2).draft("near_duplicate", STATEMENTS)
    assert failed.value.reason == reason


def test_an_unreachable_endpoint_and_a_cluster_over_budget_are_draft_failed() -> None:
    server = LocalServer(lambda handler, _body: send(handler, 200, b"{}"))
    url = server.url
    server.server.server_close()
    with pytest.raises(DraftFailed) as unreachable:
        OpenAIDrafter(url, "m", timeout=1).draft("near_duplicate", STATEMENTS)
    assert unreachable.value.reason == "unreachable"
    with pytest.raises(DraftFailed) as over:  # refused before anything is sent
        OpenAIDrafter(url, "m", timeout=1).draft("near_duplicate", ["x" * MAX_INPUT_CHARS, "y"])
    assert over.value.reason == "over_budget"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Staging is rebuilt on Sunday nights", None),
        ("Staging is rebuilt on Sunday nights\nby the platform team", None),  # whitespace is visible
        ("Staging is rebuilt\x00 on Sundays", "unstorable_text"),
        ("Staging is rebuilt \ud800 on Sundays", "unstorable_text"),
        ("Staging is re\u200bbuilt on Sundays", "invisible_character"),
        ("\ufeffStaging is rebuilt on Sundays", "invisible_character"),
        ("Staging is rebuilt\u202e on Sundays", "invisible_character"),
        ("   ", "low_information"),
        ("ok", "low_information"),
        ("Staging is rebuilt. " * (MAX_PROPOSAL_CHARS // 10), "too_long"),
    ],
)
def test_a_models_statement_is_held_to_the_rules_of_caller_text(text: str, problem: str | None) -> None:
    assert drafted_text_problem(text) == problem
    wording = worded("openai", text)
    assert wording.fallback == problem
    assert wording.content == (None if problem else text.strip())


def test_the_settings_pick_the_drafter(tmp_path: Path) -> None:
    base = {"MEMWARDEN_DATA_DIR": str(tmp_path)}
    assert drafter_from_settings(Settings.from_env(base)) is None  # the built-in extractive one
    assert drafter_from_settings(Settings.from_env({**base, "MEMWARDEN_DRAFTER": "extractive"})) is None
    chosen = drafter_from_settings(
        Settings.from_env(
            {
                **base,
                "MEMWARDEN_DRAFTER": "openai",
                "MEMWARDEN_DRAFTER_URL": "http://127.0.0.1:9/v1",
                "MEMWARDEN_DRAFTER_MODEL": "m",
                "MEMWARDEN_DRAFTER_API_KEY": "sk-x",
            }
        )
    )
    assert isinstance(chosen, OpenAIDrafter)
    assert chosen.url == "http://127.0.0.1:9/v1/chat/completions"
    with pytest.raises(ValueError, match="MEMWARDEN_DRAFTER"):
        Settings.from_env({**base, "MEMWARDEN_DRAFTER": "poet"})
    with pytest.raises(ValueError, match="MEMWARDEN_DRAFTER_URL"):
        drafter_from_settings(Settings.from_env({**base, "MEMWARDEN_DRAFTER": "openai"}))
    with pytest.raises(ValueError, match="drafter model"):
        OpenAIDrafter("http://127.0.0.1:9/v1", "")
