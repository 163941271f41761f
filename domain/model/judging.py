"""Judges: does one statement contradict another? (docs/architecture.md section 5)

A judge takes two ``Statement``s and returns a ``Judgement``: ``contradiction`` or
``compatible``, the rule that decided and a short explanation. A judge that cannot answer
(a model endpoint down) raises ``JudgeUnavailable``; the autopilot then records
``judge_unavailable`` for the memory, never a silent "compatible".

The built-in ``RulesJudge`` is pure and deterministic. It says ``contradiction`` only when
one of its rules is sure:

- ``same_slot``: the same (subject, attribute) with another value;
- ``negation``: the same statement, once negated ("is not", "never", "doesn't" ...);
- ``antonym``: the same statement with one word swapped for its opposite (open/closed);
- ``frame``: the same sentence frame with another number, date, time, place or name after
  the verb. A difference before the verb is a different *subject* ("the rotation of team 1
  changes on Tuesday" says nothing about team 2): compatible.

Anything else (paraphrases, unrelated statements) is ``compatible``. Explanations name the
rule and the kind of difference, never the caller's words: a finding's explanation goes
on the ledger unsealed and must not outlive an erasure of what it quotes.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from typing import Literal, Protocol

import msgspec

Verdict = Literal["contradiction", "compatible"]


class Statement(msgspec.Struct, frozen=True, kw_only=True):
    """What a judge sees of a memory."""

    content: str
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None


class Judgement(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Verdict
    rule: str
    explanation: str

    @property
    def contradicts(self) -> bool:
        return self.verdict == "contradiction"


class JudgeUnavailable(Exception):
    """The judge could not answer (an endpoint down, a malformed answer)."""


class Judge(Protocol):
    """Anything that judges a pair: the rules, a model behind an endpoint."""

    @property
    def name(self) -> str: ...

    def judge(self, a: Statement, b: Statement) -> Judgement: ...


# -- tokens -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\d{4}-\d{2}-\d{2}"  # an ISO date
    r"|\d{1,2}:\d{2}(?:\s?[ap]\.?m\.?)?"  # a clock time
    r"|\d+(?:[.,]\d+)*(?:\s?[ap]\.?m\.?\b)?"  # a number (or "9 am")
    r"|[^\W\d_]+(?:['\u2019][^\W\d_]+)?"  # a word, with its apostrophe
    r"|\d+[^\W\d_]+"  # 3rd, 10th, 5pm
)
_NUMBER_WORDS = {
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
}
_NEGATORS = frozenset({"not", "no", "never", "none", "nobody", "nothing", "neither", "nor"})
_CONTRACTIONS = {
    "isn't": "is",
    "aren't": "are",
    "wasn't": "was",
    "weren't": "were",
    "doesn't": "does",
    "don't": "do",
    "didn't": "did",
    "won't": "will",
    "can't": "can",
    "cannot": "can",
    "couldn't": "could",
    "shouldn't": "should",
    "wouldn't": "would",
    "hasn't": "has",
    "haven't": "have",
    "hadn't": "had",
    "mustn't": "must",
}
_DO_AUXILIARIES = frozenset({"do", "does", "did"})
_ANTONYMS = {
    frozenset(pair)
    for pair in (
        ("open", "closed"),
        ("enabled", "disabled"),
        ("on", "off"),
        ("true", "false"),
        ("allowed", "forbidden"),
        ("allowed", "prohibited"),
        ("permitted", "forbidden"),
        ("active", "inactive"),
        ("required", "optional"),
        ("mandatory", "optional"),
        ("public", "private"),
        ("online", "offline"),
        ("available", "unavailable"),
        ("up", "down"),
        ("increased", "decreased"),
        ("increases", "decreases"),
        ("before", "after"),
        ("always", "never"),
        ("accepted", "rejected"),
        ("approved", "rejected"),
        ("passed", "failed"),
        ("succeeded", "failed"),
        ("healthy", "unhealthy"),
        ("supported", "unsupported"),
        ("likes", "dislikes"),
        ("love", "hate"),
        ("loves", "hates"),
        ("include", "exclude"),
        ("includes", "excludes"),
        ("internal", "external"),
        ("remote", "onsite"),
        ("yes", "no"),
    )
}
# Words that open a sentence's predicate: what comes before the first of them is its subject.
_VERBS = frozenset(
    {
        *_DO_AUXILIARIES,
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "has",
        "have",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
        "must",
        "may",
        "might",
        "shall",
        "changes",
        "changed",
        "starts",
        "started",
        "begins",
        "began",
        "ends",
        "ended",
        "moves",
        "moved",
        "lives",
        "lived",
        "works",
        "worked",
        "costs",
        "cost",
        "meets",
        "met",
        "runs",
        "ran",
        "uses",
        "used",
        "prefers",
        "preferred",
        "likes",
        "liked",
        "dislikes",
        "owns",
        "owned",
        "leads",
        "led",
        "reports",
        "reported",
        "joined",
        "joins",
        "left",
        "leaves",
        "takes",
        "took",
        "happens",
        "happened",
        "ships",
        "shipped",
        "expires",
        "expired",
        "opens",
        "opened",
        "closes",
        "closed",
        "sits",
        "sat",
        "weighs",
        "measures",
        "lasts",
        "lasted",
        "falls",
        "fell",
        "arrives",
        "arrived",
        "deploys",
        "deployed",
        "belongs",
        "belonged",
        "speaks",
        "spoke",
        "drives",
        "drove",
        "goes",
        "went",
        "comes",
        "came",
        "stays",
        "stayed",
        "needs",
        "needed",
        "wants",
        "wanted",
        "loves",
        "hates",
        "hosts",
        "hosted",
        "points",
        "pointed",
        "listens",
        "rotates",
        "rotated",
        "scheduled",
        "set",
        "located",
        "born",
        "equals",
        "holds",
        "held",
        "contains",
        "includes",
        "excludes",
        "requires",
        "required",
        "allows",
        "allowed",
        # base forms, after a plural subject
        "run",
        "start",
        "begin",
        "end",
        "use",
        "live",
        "work",
        "meet",
        "need",
        "want",
        "ship",
        "happen",
        "take",
        "leave",
        "go",
        "come",
        "own",
        "lead",
        "report",
        "hold",
        "sit",
        "open",
        "close",
    }
)
_WEEKDAYS = frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"})
_MONTHS = frozenset(
    {
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    }
)
_TIME_WORDS = frozenset({"noon", "midnight", "morning", "afternoon", "evening", "night", "today", "tomorrow"})
_DETERMINERS = frozenset({"the", "a", "an", "this", "that", "these", "those", "its", "their", "our", "my"})
MIN_SHARED_TOKENS = 3
MIN_SHARED_SHARE = 0.5
MAX_CHANGED_TOKENS = 4


class _Token(msgspec.Struct, frozen=True):
    text: str  # case-folded, number words as digits
    capitalized: bool  # in the original: a name, a place (not at the sentence's start)


def _tokens(text: str) -> list[_Token]:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    found: list[_Token] = []
    for index, match in enumerate(_TOKEN.finditer(text)):
        raw = match.group(0)
        lowered = raw.casefold().replace(" ", "").replace(".", "") if raw[0].isdigit() else raw.casefold()
        if lowered.endswith("'s") and lowered not in _CONTRACTIONS:
            lowered = lowered[:-2]  # Dana's office -> dana office
        capitalized = raw[0].isupper() and (index > 0 or (raw.isupper() and len(raw) > 1))
        found.append(_Token(_NUMBER_WORDS.get(lowered, lowered), capitalized))
    return found


def _denegated(tokens: list[_Token]) -> tuple[list[_Token], int]:
    """The tokens without negation (contractions opened, a "do" auxiliary that only carried
    the negation dropped), and how many negations there were."""
    plain: list[_Token] = []
    negations = 0
    for token in tokens:
        opened = _CONTRACTIONS.get(token.text)
        if opened is not None:
            negations += 1
            if opened not in _DO_AUXILIARIES:
                plain.append(_Token(opened, capitalized=False))
        elif token.text in _NEGATORS:
            negations += 1
        elif token.text in _DO_AUXILIARIES:
            continue
        else:
            plain.append(token)
    return plain, negations


def _verb_index(tokens: list[_Token]) -> int:
    """Where the predicate starts: the first known verb after the first token; else the
    first word that looks like one ("seats", "failed") after a word that is no determiner;
    else the end (the whole sentence is its subject)."""
    for index, token in enumerate(tokens):
        if index > 0 and token.text in _VERBS:
            return index
    for index in range(1, len(tokens)):
        word, before = tokens[index].text, tokens[index - 1].text
        if (
            len(word) > 3
            and word.isalpha()
            and word.endswith(("s", "ed"))
            and not word.endswith("ss")
            and before not in _DETERMINERS
        ):
            return index
    return len(tokens)


def _stem(text: str) -> str:
    """A verb's third-person "s" dropped, so "eats" meets "doesn't eat"."""
    return text[:-1] if len(text) > 3 and text.endswith("s") and not text.endswith("ss") else text


def _kind(tokens: list[_Token]) -> str | None:
    """What a changed span holds, when it is a value a frame can hold: a number, a date, a
    time, a name or place. None for common words (another meaning, or a paraphrase)."""
    texts = [t.text for t in tokens if t.text not in _DETERMINERS]
    if not texts:
        return None
    if any((t[0].isdigit() and ":" in t) or (t.endswith(("am", "pm")) and t[0].isdigit()) for t in texts):
        return "time"
    if any(t in _TIME_WORDS for t in texts):
        return "time"
    if any(t in _WEEKDAYS or t in _MONTHS or re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in texts):
        return "date"
    if any(t[0].isdigit() for t in texts):
        return "number"
    if all(t.capitalized for t in tokens if t.text not in _DETERMINERS):
        return "name or place"
    return None


def _same(a: list[_Token], b: list[_Token]) -> bool:
    return [_stem(t.text) for t in a] == [_stem(t.text) for t in b]


class RulesJudge:
    """The built-in judge: deterministic, explained, no model (see the module docstring)."""

    name = "rules"

    def judge(self, a: Statement, b: Statement) -> Judgement:
        return (
            _slot(a, b)
            or _negation(a.content, b.content)
            or _frame(a.content, b.content)
            or Judgement(verdict="compatible", rule="none", explanation="no rule finds a contradiction")
        )


def _slot(a: Statement, b: Statement) -> Judgement | None:
    if None in (a.subject, a.attribute, b.subject, b.attribute):
        return None
    key_a = (_key(a.subject or ""), _key(a.attribute or ""))
    if key_a != (_key(b.subject or ""), _key(b.attribute or "")):
        return None
    value_a, value_b = _key(a.value or a.content), _key(b.value or b.content)
    if value_a == value_b:
        return Judgement(
            verdict="compatible", rule="same_slot", explanation="the same slot with the same value"
        )
    return Judgement(
        verdict="contradiction", rule="same_slot", explanation="the same slot with another value"
    )


def _key(text: str) -> str:
    return " ".join(t.text for t in _tokens(text))


def _negation(a: str, b: str) -> Judgement | None:
    plain_a, negations_a = _denegated(_tokens(a))
    plain_b, negations_b = _denegated(_tokens(b))
    if len(plain_a) < 2 or not _same(plain_a, plain_b):
        return None
    if negations_a % 2 == negations_b % 2:
        return Judgement(
            verdict="compatible", rule="negation", explanation="the same statement, negated alike"
        )
    return Judgement(verdict="contradiction", rule="negation", explanation="the same statement, once negated")


def _frame(a: str, b: str) -> Judgement | None:
    tokens_a, negations_a = _denegated(_tokens(a))
    tokens_b, negations_b = _denegated(_tokens(b))
    if negations_a % 2 != negations_b % 2:
        return None  # a negated statement with another value: no sure rule
    texts_a, texts_b = [t.text for t in tokens_a], [t.text for t in tokens_b]
    matcher = difflib.SequenceMatcher(a=texts_a, b=texts_b, autojunk=False)
    shared = sum(block.size for block in matcher.get_matching_blocks())
    if shared < MIN_SHARED_TOKENS or shared < MIN_SHARED_SHARE * max(len(texts_a), len(texts_b)):
        return None
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if not changes or any(op[0] != "replace" for op in changes):
        return None  # identical, or words added or dropped: a paraphrase, a detail
    if sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in changes) > MAX_CHANGED_TOKENS:
        return None
    verb_a, verb_b = _verb_index(tokens_a), _verb_index(tokens_b)
    if any(i1 < verb_a or j1 < verb_b for _, i1, _i2, j1, _j2 in changes):
        return Judgement(
            verdict="compatible", rule="different_subject", explanation="the same frame about another subject"
        )
    for _, i1, i2, j1, j2 in changes:
        span_a, span_b = tokens_a[i1:i2], tokens_b[j1:j2]
        if i2 - i1 == 1 and j2 - j1 == 1 and frozenset((span_a[0].text, span_b[0].text)) in _ANTONYMS:
            return Judgement(
                verdict="contradiction",
                rule="antonym",
                explanation="the same statement with an opposite word",
            )
        kind_a, kind_b = _kind(span_a), _kind(span_b)
        if kind_a is not None and kind_a == kind_b:
            return Judgement(
                verdict="contradiction", rule="frame", explanation=f"the same frame with another {kind_a}"
            )
    return None
