"""The extractor without a database: reading a model's answer (pure), its settings, and the
OpenAI-compatible client against a real HTTP server on the loopback interface."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.extraction import ExtractionFailed, OpenAIExtractor, extractor_from_settings
from memwarden.domain.extraction.parsing import facts_from_answer, facts_from_completion
from memwarden.domain.model.text import normalize
from memwarden.domain.settings import Settings
from tests.local_http import LocalServer, send
from tests.processes import TIMED


def completion(answer: str | None) -> bytes:
    """A chat-completions response body whose one message says ``answer``."""
    message = {"role": "assistant", "content": answer}
    return json.dumps(
        {"id": "c1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    ).encode()


def failure(call: Any, *args: Any) -> str:
    with pytest.raises(ExtractionFailed) as caught:
        call(*args)
    return caught.value.reason


# -- the model's answer (pure) --------------------------------------------------------------


def test_a_json_list_gives_its_facts_trimmed_in_order() -> None:
    answer = '[" Dana moved to Berlin in May. ", "Dana leads the platform team."]'
    assert facts_from_answer(answer, 8) == ("Dana moved to Berlin in May.", "Dana leads the platform team.")


@pytest.mark.parametrize(
    "answer",
    [
        '```json\n["Kim owns the billing service."]\n```',
        '```\n["Kim owns the billing service."]\n```',
        '  {"facts": ["Kim owns the billing service."]}  ',
    ],
)
def test_a_fenced_list_or_a_facts_object_is_read_too(answer: str) -> None:
    assert facts_from_answer(answer, 8) == ("Kim owns the billing service.",)


def test_facts_that_normalize_alike_are_one_fact_and_blanks_are_dropped() -> None:
    answer = json.dumps(["Kim owns billing.", "  ", "KIM  owns billing", "Kim owns payroll."])
    assert facts_from_answer(answer, 8) == ("Kim owns billing.", "Kim owns payroll.")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("Kim owns billing.", "extractor_failed: bad_output"),
        ('["Kim owns billing."', "extractor_failed: bad_output"),
        ('{"facts": ["a fact"], "note": "x"}', "extractor_failed: bad_output"),
        ('{"items": ["a fact"]}', "extractor_failed: bad_output"),
        ('["a fact", 3]', "extractor_failed: bad_output"),
        ('"a fact"', "extractor_failed: bad_output"),
        ("[]", "extractor_failed: empty"),
        ('["", "   "]', "extractor_failed: empty"),
        ('["Kim owns\\u0000 billing."]', "extractor_failed: invalid_text"),
        (json.dumps([f"Fact number {n}." for n in range(4)]), "over_budget"),
    ],
)
def test_anything_else_fails_with_its_reason(answer: str, reason: str) -> None:
    assert failure(facts_from_answer, answer, 3) == reason


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"choices": []}',
        b'{"data": []}',
        b'{"choices": [{"message": {"role": "assistant"}}]}',
        completion(None),
        b'{"choices": [{"message": {"content": "[\\"a \\ud800 b\\"]"}}]}',
    ],
)
def test_a_body_that_is_not_a_completion_is_a_bad_response(payload: bytes) -> None:
    assert failure(facts_from_completion, payload, 8) == "extractor_failed: bad_response"


def test_the_first_message_of_a_completion_is_read() -> None:
    assert facts_from_completion(completion('["Kim owns billing."]'), 8) == ("Kim owns billing.",)


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\x00")), max_size=12))
def test_facts_are_the_distinct_non_blank_entries_in_order(entries: list[str]) -> None:
    expected: dict[str, str] = {}
    for entry in (e.strip() for e in entries):
        if entry:
            expected.setdefault(normalize(entry), entry)
    answer = json.dumps(entries)
    if not expected:
        assert failure(facts_from_answer, answer, 12) == "extractor_failed: empty"
    else:
        assert facts_from_answer(answer, 12) == tuple(expected.values())


# -- settings -------------------------------------------------------------------------------


def test_settings_read_the_extractor_from_the_environment(tmp_path: Path) -> None:
    env = {
        "MEMWARDEN_DATA_DIR": str(tmp_path),
        "MEMWARDEN_EXTRACTOR_URL": " http://127.0.0.1:9/v1 ",
        "MEMWARDEN_EXTRACTOR_MODEL": "small-model",
        "MEMWARDEN_EXTRACTOR_API_KEY": "sk-x",
        "MEMWARDEN_EXTRACTOR_TIMEOUT": "2.5",
        "MEMWARDEN_EXTRACTOR_MAX_INPUT_CHARS": "500",
        "MEMWARDEN_EXTRACTOR_MAX_FACTS": "4",
    }
    settings = Settings.from_env(env)
    extractor = extractor_from_settings(settings)
    assert isinstance(extractor, OpenAIExtractor)
    assert extractor.url == "http://127.0.0.1:9/v1/chat/completions"
    assert (extractor.model, extractor.timeout, extractor.max_input_chars, extractor.max_facts) == (
        "small-model",
        2.5,
        500,
        4,
    )
    assert "sk-x" not in repr(extractor)
    plain = Settings.from_env({"MEMWARDEN_DATA_DIR": str(tmp_path)})
    assert extractor_from_settings(plain) is None
    assert (plain.extractor_timeout, plain.extractor_max_input_chars, plain.extractor_max_facts) == (
        10.0,
        16_384,
        32,
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMWARDEN_EXTRACTOR_URL": "http://x/v1"}, "needs MEMWARDEN_EXTRACTOR_MODEL"),
        ({"MEMWARDEN_EXTRACTOR_TIMEOUT": "soon"}, "MEMWARDEN_EXTRACTOR_TIMEOUT='soon' is not a number"),
        ({"MEMWARDEN_EXTRACTOR_MAX_FACTS": "0"}, "MEMWARDEN_EXTRACTOR_MAX_FACTS must be positive"),
        ({"MEMWARDEN_EXTRACTOR_MAX_INPUT_CHARS": "1.5"}, "is not a number"),
    ],
)
def test_settings_refuse_an_incomplete_or_bad_extractor(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_env({"MEMWARDEN_DATA_DIR": "/tmp/unused", **env})


@pytest.mark.parametrize(
    ("args", "message"),
    [(("ftp://x/v1", "m"), "http\\(s\\) URL"), (("http://x/v1", ""), "model name must not be empty")],
)
def test_the_extractor_refuses_bad_arguments(args: tuple[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenAIExtractor(*args)


# -- the client -----------------------------------------------------------------------------


def answering(answer: str) -> Any:
    def respond(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, 200, completion(answer))

    return respond


def test_the_extractor_posts_a_chat_completion_and_reads_its_facts() -> None:
    with LocalServer(answering('["Kim owns billing.", "Kim joined in 2024."]')) as server:
        extractor = OpenAIExtractor(server.url + "/", "small-model", api_key="sk-test")
        facts = extractor.extract("Kim owns billing; she joined in 2024.")
    assert facts == ("Kim owns billing.", "Kim joined in 2024.")
    ((path, headers, body),) = server.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "small-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "JSON array of strings" in body["messages"][0]["content"]
    assert body["messages"][1]["content"] == "Kim owns billing; she joined in 2024."


def test_content_over_the_input_budget_is_never_sent() -> None:
    with LocalServer(answering('["Kim owns billing."]')) as server:
        extractor = OpenAIExtractor(server.url, "m", max_input_chars=10)
        assert failure(extractor.extract, "Kim owns billing and payroll.") == "over_budget"
        assert extractor.extract("Kim: bill.") == ("Kim owns billing.",)
    assert len(server.requests) == 1


def test_an_answer_over_the_fact_budget_is_not_used() -> None:
    with LocalServer(answering(json.dumps([f"Fact {n} holds." for n in range(3)]))) as server:
        assert failure(OpenAIExtractor(server.url, "m", max_facts=2).extract, "x y z") == "over_budget"


def test_an_http_error_fails_the_extraction() -> None:
    def fail(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        send(handler, 503, b'{"error": "overloaded"}')

    with LocalServer(fail) as server:
        assert failure(OpenAIExtractor(server.url, "m").extract, "Kim owns billing.") == (
            "extractor_failed: http_error"
        )


@TIMED
def test_a_slow_extractor_times_out_within_its_timeout() -> None:
    def slow(handler: BaseHTTPRequestHandler, _body: dict[str, Any]) -> None:
        time.sleep(1.5)
        with contextlib.suppress(ConnectionError):  # the client gave up long ago
            send(handler, 200, completion('["late"]'))

    with LocalServer(slow) as server:
        started = time.monotonic()
        reason = failure(OpenAIExtractor(server.url, "m", timeout=0.3).extract, "Kim owns billing.")
        assert reason == "extractor_failed: timeout"
        assert time.monotonic() - started < 1.2


def test_an_extractor_that_is_down_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    extractor = OpenAIExtractor(f"http://127.0.0.1:{port}/v1", "m", timeout=2)
    assert failure(extractor.extract, "Kim owns billing.") == "extractor_failed: unreachable"
