"""An extractor behind an OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint."""

from __future__ import annotations

from memwarden.domain.chat import ChatEndpoint
from memwarden.domain.endpoint import EndpointError
from memwarden.domain.extraction.base import ExtractionFailed
from memwarden.domain.extraction.parsing import facts_from_completion
from memwarden.domain.settings import Settings

MAX_RESPONSE_BYTES = 1024 * 1024
SYSTEM_PROMPT = (
    "You turn what an agent wants to remember into memories. List the short, self-contained "
    "facts the user's content states: one statement each, understandable on its own (name "
    "people, places and things instead of pronouns; keep numbers, dates and names exact), "
    "nothing the content does not say, no commentary. Answer with a JSON array of strings "
    "and nothing else."
)


class OpenAIExtractor:
    """Content in, facts out, via an OpenAI-compatible chat-completions API.

    ``timeout`` bounds the connect and each read, in seconds. The budget: content longer
    than ``max_input_chars`` is not sent, and an answer of more than ``max_facts`` facts is
    not used (both ``over_budget``: a write is never silently cut short).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 10.0,
        max_input_chars: int = 16_384,
        max_facts: int = 32,
    ) -> None:
        self.endpoint = ChatEndpoint(
            base_url, model, what="extractor", api_key=api_key, timeout=timeout, max_bytes=MAX_RESPONSE_BYTES
        )
        if max_input_chars < 1 or max_facts < 1:
            raise ValueError("the extractor's budget must be positive")
        self.url = self.endpoint.url
        self.model = model
        self.timeout = timeout
        self.max_input_chars = max_input_chars
        self.max_facts = max_facts

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIExtractor(url={self.url!r}, model={self.model!r})"

    def extract(self, content: str) -> tuple[str, ...]:
        if len(content) > self.max_input_chars:
            raise ExtractionFailed.over_budget(
                f"content of {len(content)} characters; the budget is {self.max_input_chars}"
            )
        try:
            payload = self.endpoint.complete(SYSTEM_PROMPT, content)
        except EndpointError as error:
            raise ExtractionFailed.failed(error.kind, str(error)) from error
        return facts_from_completion(payload, self.max_facts)


def extractor_from_settings(settings: Settings) -> OpenAIExtractor | None:
    """The configured extractor, or None when ``MEMWARDEN_EXTRACTOR_URL`` is not set."""
    if settings.extractor_url is None:
        return None
    return OpenAIExtractor(
        settings.extractor_url,
        settings.extractor_model,
        api_key=settings.extractor_api_key,
        timeout=settings.extractor_timeout,
        max_input_chars=settings.extractor_max_input_chars,
        max_facts=settings.extractor_max_facts,
    )
