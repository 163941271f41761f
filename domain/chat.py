"""An OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint asked for one JSON
object: the client the model judge, the model drafter and the extractor share (the
extractor reads the raw completion its own way).

A system prompt and one user message go in (temperature 0); the first choice's message
must hold a JSON object of the caller's type, optionally inside a Markdown code fence
(models add one unasked). The HTTP plumbing is :mod:`domain.endpoint`'s: every transport
failure is its ``EndpointError``; an answer that is not such an object is ``BadAnswer``.
Nothing is guessed from free text.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from memwarden.domain.endpoint import endpoint_url, post_json

T = TypeVar("T")
DEFAULT_MAX_BYTES = 64 * 1024


class BadAnswer(Exception):
    """The endpoint answered, but not with a chat completion holding the object asked for."""


class _Message(msgspec.Struct, frozen=True):
    content: str | None = None


class _Choice(msgspec.Struct, frozen=True):
    message: _Message


class _Completion(msgspec.Struct, frozen=True):
    choices: list[_Choice]


class ChatEndpoint:
    """One model behind one endpoint. ``what`` names its use in errors (``judge``,
    ``drafter``); ``timeout`` bounds the connect and each read, in seconds."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        what: str,
        api_key: str | None = None,
        timeout: float = 10.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.url = endpoint_url(base_url, "chat/completions", what)
        if not model:
            raise ValueError(f"the {what} model name must not be empty")
        if timeout <= 0:
            raise ValueError(f"the {what} timeout must be positive")
        self.model = model
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._api_key = api_key or None

    def __repr__(self) -> str:  # never shows the API key
        return f"ChatEndpoint(url={self.url!r}, model={self.model!r})"

    def ask(self, system: str, user: str, answer: type[T]) -> T:
        """The model's answer to ``user``, decoded as ``answer``. ``EndpointError``: no
        answer (unreachable, timeout, HTTP error, too large); ``BadAnswer``: not one."""
        return answer_of(self.complete(system, user), answer)

    def complete(self, system: str, user: str) -> bytes:
        """The raw chat completion answering ``user`` (``EndpointError`` when none)."""
        body = msgspec.json.encode(
            {
                "model": self.model,
                "temperature": 0,
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            }
        )
        return post_json(
            self.url, body, api_key=self._api_key, timeout=self.timeout, max_bytes=self.max_bytes
        )


def answer_of(payload: bytes, answer: type[T]) -> T:
    """The JSON object of a chat completion's first message, decoded as ``answer``."""
    try:
        completion = msgspec.json.decode(payload, type=_Completion)
        content = completion.choices[0].message.content
        if content is None:
            raise BadAnswer("the chat completion has no message content")
        text = content.strip()
        if text.startswith("```"):  # a fenced answer
            text = text.strip("`").removeprefix("json").strip()
        return msgspec.json.decode(text, type=answer)
    except (msgspec.DecodeError, msgspec.ValidationError, IndexError) as error:
        raise BadAnswer(f"the answer is not the expected JSON object: {str(error)[:200]}") from error
