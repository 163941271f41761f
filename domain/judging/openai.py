"""A judge behind an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint.

It sends both statements and asks for a JSON object ``{"contradiction": bool, "reason":
str}``. Any failure (unreachable, timeout, HTTP error, an answer that is not that object)
is ``JudgeUnavailable``: the autopilot records ``judge_unavailable``, never a guess. The
model's reason is not kept (it may quote the statements); the judgement's explanation is
fixed text.
"""

from __future__ import annotations

import msgspec

from memwarden.domain.chat import BadAnswer, ChatEndpoint
from memwarden.domain.endpoint import EndpointError
from memwarden.domain.model.judging import Judge, Judgement, JudgeUnavailable, RulesJudge, Statement, Verdict
from memwarden.domain.settings import Settings

MAX_RESPONSE_BYTES = 64 * 1024
SYSTEM_PROMPT = (
    "You compare two statements stored as memories. Answer whether they contradict each other: "
    "both cannot be true of the same thing at the same time. Statements about different subjects, "
    "paraphrases and added detail do not contradict. Answer with a JSON object "
    '{"contradiction": true|false, "reason": "<short>"} and nothing else.'
)


class _Answer(msgspec.Struct, frozen=True):
    contradiction: bool
    reason: str = ""


class OpenAIJudge:
    name = "openai"

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 10.0
    ) -> None:
        self.endpoint = ChatEndpoint(
            base_url, model, what="judge", api_key=api_key, timeout=timeout, max_bytes=MAX_RESPONSE_BYTES
        )
        self.url = self.endpoint.url
        self.model = model
        self.timeout = timeout

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIJudge(url={self.url!r}, model={self.model!r})"

    def judge(self, a: Statement, b: Statement) -> Judgement:
        try:
            answer = self.endpoint.ask(SYSTEM_PROMPT, f"A: {a.content}\nB: {b.content}", _Answer)
        except EndpointError as error:
            raise JudgeUnavailable(f"judge endpoint {error.kind}") from error
        except BadAnswer as error:
            raise JudgeUnavailable("the judge's answer is not the expected JSON object") from error
        verdict: Verdict = "contradiction" if answer.contradiction else "compatible"
        return Judgement(
            verdict=verdict, rule="model", explanation=f"the model {self.model!r} says {verdict}"
        )


def judge_from_settings(settings: Settings) -> Judge | None:
    """``MEMWARDEN_JUDGE``: ``rules`` (the default), ``openai`` (needs the endpoint's URL and
    model), or ``none`` (every memory is recorded ``judge_unavailable``)."""
    if settings.judge == "none":
        return None
    if settings.judge == "openai":
        if settings.judge_url is None:
            raise ValueError("MEMWARDEN_JUDGE=openai needs MEMWARDEN_JUDGE_URL and MEMWARDEN_JUDGE_MODEL")
        return OpenAIJudge(settings.judge_url, settings.judge_model, api_key=settings.judge_api_key)
    return RulesJudge()
