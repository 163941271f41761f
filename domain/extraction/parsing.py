"""Reading a model's answer: pure, no I/O.

A chat completion's first message must hold a JSON array of strings (or an object whose
only key is ``facts``, holding one), optionally inside a Markdown code fence, which models
add unasked. Anything else fails the extraction; nothing is guessed from free text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from memwarden.domain.extraction.base import ExtractionFailed
from memwarden.domain.model.text import normalize, storable_text_problem

_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n(?P<body>.*)\n[ \t]*```\Z", re.DOTALL)


class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message


class _Completion(msgspec.Struct):
    choices: list[_Choice]


def facts_from_completion(payload: bytes, max_facts: int) -> tuple[str, ...]:
    """The facts of a ``chat/completions`` response body (see :func:`facts_from_answer`)."""
    try:
        completion = msgspec.json.decode(payload, type=_Completion)
    except msgspec.MsgspecError as error:
        raise ExtractionFailed.failed("bad_response", f"not a chat completion: {error}") from error
    if not completion.choices or completion.choices[0].message.content is None:
        raise ExtractionFailed.failed("bad_response", "the chat completion has no message content")
    return facts_from_answer(completion.choices[0].message.content, max_facts)


def facts_from_answer(answer: str, max_facts: int) -> tuple[str, ...]:
    """The distinct facts of a model's answer, trimmed, in the model's order.

    Blank entries are dropped; of facts that normalize alike (one memory's dedupe key) the
    first is kept. Fails with ``bad_output`` when the answer is not a JSON list of strings,
    ``invalid_text`` when a fact is text PostgreSQL cannot store, ``empty`` when no fact
    is left, and ``over_budget`` when more than ``max_facts`` are.
    """
    data = _decoded(answer)
    if isinstance(data, dict) and list(data) == ["facts"]:
        data = data["facts"]
    if not isinstance(data, list) or not all(isinstance(item, str) for item in data):
        raise ExtractionFailed.failed("bad_output", "the answer is not a JSON list of strings")
    facts = _distinct(item.strip() for item in data)
    for fact in facts:
        problem = storable_text_problem(fact)
        if problem is not None:
            raise ExtractionFailed.failed("invalid_text", f"a fact {problem}")
    if not facts:
        raise ExtractionFailed.failed("empty", "the answer lists no facts")
    if len(facts) > max_facts:
        raise ExtractionFailed.over_budget(f"the answer lists {len(facts)} facts; the budget is {max_facts}")
    return facts


def _decoded(answer: str) -> object:
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced is not None:
        text = fenced.group("body")
    try:
        return msgspec.json.decode(text)
    except msgspec.MsgspecError as error:
        raise ExtractionFailed.failed("bad_output", f"the answer is not JSON: {error}") from error


def _distinct(facts: Iterable[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    kept: list[str] = []
    for fact in facts:
        key = normalize(fact)
        if fact and key not in seen:
            seen.add(key)
            kept.append(fact)
    return tuple(kept)
