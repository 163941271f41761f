"""A drafter behind an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint (the
judge's client, :mod:`domain.chat`).

It sends the cluster's statements and asks for a JSON object ``{"statement": str}``. Any
failure (unreachable, timeout, HTTP error, an answer that is not that object, a cluster
over the input budget) is ``DraftFailed`` with its reason; the consolidation pass then
keeps the extractive choice and records the reason. The statement itself is checked by
the pass, as caller text is (``drafted_text_problem``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from memwarden.domain.chat import BadAnswer, ChatEndpoint
from memwarden.domain.endpoint import EndpointError
from memwarden.domain.model.consolidation import Drafter, DraftFailed
from memwarden.domain.model.events import ProposalKind
from memwarden.domain.settings import Settings

MAX_RESPONSE_BYTES = 64 * 1024
MAX_STATEMENTS = 20
"""A cluster's first 20 members (the pass lists them best first) are sent, no more."""
MAX_INPUT_CHARS = 24_000
"""And at most this many characters of them: a larger cluster is ``over_budget``."""
SYSTEM_PROMPT = (
    "You consolidate memories that an organization's AI agents wrote. The user lists statements "
    "that say one thing or are needed together. Write one short, self-contained canonical "
    "statement that keeps what they say (numbers, dates, names exact), settles nothing they "
    "leave open, adds nothing they do not say and has no commentary. Where they disagree, the "
    "first statement is the most trusted. Answer with a JSON object "
    '{"statement": "<text>"} and nothing else.'
)
KIND_HINTS: dict[str, str] = {
    "near_duplicate": "near-duplicates: say it once",
    "slot_history": "versions of one fact over time: state the one the first statement gives",
    "faulted_together": "facts often needed together: join them",
    "fault_near_miss": "split statements that one statement would answer: join them",
}


class _Answer(msgspec.Struct, frozen=True):
    statement: str


class OpenAIDrafter:
    name = "openai"

    def __init__(
        self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 10.0
    ) -> None:
        self.endpoint = ChatEndpoint(
            base_url, model, what="drafter", api_key=api_key, timeout=timeout, max_bytes=MAX_RESPONSE_BYTES
        )
        self.url = self.endpoint.url
        self.model = model

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIDrafter(url={self.url!r}, model={self.model!r})"

    def draft(self, kind: ProposalKind, statements: Sequence[str]) -> str:
        listed = "\n".join(f"{n}. {s}" for n, s in enumerate(statements[:MAX_STATEMENTS], 1))
        if len(listed) > MAX_INPUT_CHARS:
            raise DraftFailed("over_budget", f"{len(listed)} characters; the budget is {MAX_INPUT_CHARS}")
        user = f"These are {KIND_HINTS.get(kind, kind)}.\n{listed}"
        try:
            answer = self.endpoint.ask(SYSTEM_PROMPT, user, _Answer)
        except EndpointError as error:
            raise DraftFailed(error.kind, str(error)) from error
        except BadAnswer as error:
            raise DraftFailed("bad_answer", str(error)) from error
        return answer.statement


def drafter_from_settings(settings: Settings) -> Drafter | None:
    """``MEMWARDEN_DRAFTER``: ``extractive`` (the default: None, the built-in drafter) or
    ``openai`` (needs the endpoint's URL and model)."""
    if settings.drafter != "openai":
        return None
    if settings.drafter_url is None:
        raise ValueError("MEMWARDEN_DRAFTER=openai needs MEMWARDEN_DRAFTER_URL and MEMWARDEN_DRAFTER_MODEL")
    return OpenAIDrafter(settings.drafter_url, settings.drafter_model, api_key=settings.drafter_api_key)
