"""The optional model judge against a real local HTTP server: its answer is used, and any
failure is ``JudgeUnavailable`` (never a guessed verdict)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from memwarden.domain.judging import OpenAIJudge, judge_from_settings
from memwarden.domain.model.judging import JudgeUnavailable, RulesJudge, Statement
from memwarden.domain.settings import Settings
from tests.local_http import LocalServer, send

A = Statement(content="Standup is at 9:30")
B = Statement(content="Standup is at 10:00")


def _completion(content: str) -> bytes:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()


def test_the_model_answer_is_the_verdict_and_the_reason_is_not_kept() -> None:
    def respond(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        said = "10:00" in body["messages"][1]["content"]
        send(handler, 200, _completion(json.dumps({"contradiction": said, "reason": "9:30 vs 10:00"})))

    with LocalServer(respond) as server:
        judge = OpenAIJudge(server.url, "judge-model", api_key="sk-test")
        judgement = judge.judge(A, B)
        assert judgement.contradicts
        assert judgement.rule == "model"
        assert "9:30" not in judgement.explanation
        assert not judge.judge(A, A).contradicts
        path, headers, _ = server.requests[0]
        assert path == "/v1/chat/completions"
        assert headers["Authorization"] == "Bearer sk-test"


@pytest.mark.parametrize(
    ("status", "body"),
    [(500, b"{}"), (200, b"not json"), (200, _completion("maybe")), (200, _completion('{"reason": "x"}'))],
)
def test_every_failure_is_judge_unavailable(status: int, body: bytes) -> None:
    with (
        LocalServer(lambda handler, _body: send(handler, status, body)) as server,
        pytest.raises(JudgeUnavailable),
    ):
        OpenAIJudge(server.url, "judge-model", timeout=2).judge(A, B)


def test_an_unreachable_endpoint_is_judge_unavailable() -> None:
    server = LocalServer(lambda handler, _body: send(handler, 200, b"{}"))
    url = server.url
    server.server.server_close()
    with pytest.raises(JudgeUnavailable):
        OpenAIJudge(url, "judge-model", timeout=1).judge(A, B)


def test_the_settings_pick_the_judge(tmp_path: Any) -> None:
    base = {"MEMWARDEN_DATA_DIR": str(tmp_path)}
    assert isinstance(judge_from_settings(Settings.from_env(base)), RulesJudge)
    assert judge_from_settings(Settings.from_env({**base, "MEMWARDEN_JUDGE": "none"})) is None
    chosen = judge_from_settings(
        Settings.from_env(
            {
                **base,
                "MEMWARDEN_JUDGE": "openai",
                "MEMWARDEN_JUDGE_URL": "http://127.0.0.1:9/v1",
                "MEMWARDEN_JUDGE_MODEL": "m",
            }
        )
    )
    assert isinstance(chosen, OpenAIJudge)
    with pytest.raises(ValueError, match="MEMWARDEN_JUDGE"):
        Settings.from_env({**base, "MEMWARDEN_JUDGE": "oracle"})
    with pytest.raises(ValueError, match="MEMWARDEN_JUDGE_URL"):
        judge_from_settings(Settings.from_env({**base, "MEMWARDEN_JUDGE": "openai"}))
