"""Judges: does one statement contradict another? (docs/architecture.md section 5)

A judge takes two ``Statement``s and returns a ``Judgement``: ``contradiction`` or
``compatible``, the rule that decided and a short explanation. A judge that cannot answer
(a model endpoint down) raises ``JudgeUnavailable``; the autopilot then records
``judge_unavailable`` for the memory, never a silent "compatible".

The built-in ``RulesJudge`` is pure and deterministic. It says ``contradiction`` only when
one of its rules is sure:

- ``same_slot``: the same (subject, attribute) with another value;
- ``negation``: the same statement, once negated ("is not", "never", "doesn't", "no
  longer", a negating prefix: "paid" / "unpaid");
- ``antonym``: the same statement with one word swapped for its opposite (open/closed);
- ``frame``: the same sentence frame with another number, date, time, place or name after
  the verb;
- ``complement``: the same subject with another definite complement of "is" ("step 1 is to
  freeze the branch" / "to run the tests") or another agent ("owned by the payments team" /
  "by the growth team");
- ``role``: two names holding one definite role ("Priya is the team lead" / "Omar is").

Most same-frame pairs teams write are not contradictions, and the frame rule says so when
a general signal shows another item rather than another value:

- a difference before the verb, or before a record's "key:", is another *subject* ("the
  rotation of team 1 changes on Tuesday" says nothing about team 2);
- a value that changed together with another word ("at 6:00 on weekdays" / "at 8:00 on
  weekends"), or that gained a qualifier ("at 18:00" / "at 16:00 on 24 December"), is
  another item, day or period;
- two ranges that do not overlap are two occurrences (two bookings, two absences);
- another item after a predicate that holds for several ("supports Python 3.10" / "3.12",
  "we have offices in Berlin" / "in Lisbon"), after a past action on numbered items
  ("reviewed pull request 812" / "815"), or another date of an indefinite event ("runs a
  training on 4 March" / "on 18 March") is another member, not another value.

The measured precision and recall per rule are in docs/judge.md.

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

from memwarden.domain.model.judging_words import (
    ANTONYMS,
    AUXILIARIES,
    CONTRACTIONS,
    COPULAS,
    DETERMINERS,
    DO_AUXILIARIES,
    HAVE,
    INCLUSIVE_VERBS,
    INDEFINITES,
    MONTHS,
    NEGATION_TAILS,
    NEGATIVE_PREFIXES,
    NEGATORS,
    NEUTRAL_ADVERBS,
    NUMBER_WORDS,
    ORDINALS,
    PAST_IRREGULAR,
    POSSESSIVES,
    PREPOSITIONS,
    PRONOUNS,
    RANGE_JOINS,
    TIME_WORDS,
    VERBS,
    WEEKDAYS,
)

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
    r"|[#@][^\W_]+(?:[-_./][^\W_]+)*"  # a channel or a handle: #incidents, @oncall
    r"|[^\W\d_]+(?:[-_./][^\W_]+)+"  # words joined into one: eu-west-1, status.example.com, on-call
    r"|\d+(?:[.,]\d+)*(?:\s?[ap]\.?m\.?\b)?"  # a number (or "9 am")
    r"|[^\W\d_]+(?:['\u2019][^\W\d_]+)?"  # a word, with its apostrophe
    r"|\d+[^\W\d_]+"  # 3rd, 10th, 5pm
)
_WORD = re.compile(r"[^\W_]+")
_JOINED = re.compile(r"[-_./]")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})\s?([ap])?")
MIN_SHARED_TOKENS = 3
MIN_SHARED_SHARE = 0.5
MAX_CHANGED_TOKENS = 4
MAX_FRAME_TOKENS = 120


class _Token(msgspec.Struct, frozen=True):
    text: str  # case-folded, number words as digits
    capitalized: bool  # in the original: a name, a place (not at the sentence's start)
    code: bool = False  # an identifier written as one word: eu-west-1, #incidents, mw-build-output
    keyed: bool = False  # the first token after a record's "key:" ("Employee 1043: ...")
    initial: bool = False  # written with a capital letter, even at the sentence's start
    value: float | None = None  # a number's or a clock time's value, for ranges


def _is_code(raw: str) -> bool:
    """A joined word that names something (a region, a bucket, a channel, a host), not a
    hyphenated common word ("on-call", "two-factor")."""
    return (
        raw[0] in "#@" or any(c.isdigit() for c in raw) or any(c in "._/" for c in raw) or raw.count("-") >= 2
    )


def _value(raw: str, text: str) -> float | None:
    clock = _CLOCK.fullmatch(raw.casefold().replace(".", ""))
    if clock is not None:
        hours = int(clock.group(1)) % 24
        if clock.group(3) == "p" and hours < 12:
            hours += 12
        return hours + int(clock.group(2)) / 60
    number = raw.replace(",", "") if raw[0].isdigit() else text
    try:
        return float(number)
    except ValueError:
        return None


def _pieces(text: str) -> list[tuple[str, int, int]]:
    """Each token's text and place; a hyphenated common word ("on-call", "two-factor") is
    its words, a joined name ("eu-west-1", "#incidents") stays one."""
    pieces: list[tuple[str, int, int]] = []
    for match in _TOKEN.finditer(text):
        raw = match.group(0)
        if raw[0].isalpha() and not raw.isalpha() and _JOINED.search(raw) and not _is_code(raw):
            offset = match.start()
            pieces.extend((w.group(0), offset + w.start(), offset + w.end()) for w in _WORD.finditer(raw))
        else:
            pieces.append((raw, match.start(), match.end()))
    return pieces


def _tokens(text: str) -> list[_Token]:
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'")
    found: list[_Token] = []
    keyed = False
    previous_end = 0
    for index, (raw, start, end) in enumerate(_pieces(text)):
        # a colon between words (not inside a clock time) ends a record's key
        starts_value = not keyed and ":" in text[previous_end:start] and index > 0
        keyed = keyed or starts_value
        previous_end = end
        lowered = raw.casefold().replace(" ", "").replace(".", "") if raw[0].isdigit() else raw.casefold()
        if lowered.endswith("'s") and lowered not in CONTRACTIONS:
            lowered = lowered[:-2]  # Dana's office -> dana office
        capitalized = raw[0].isupper() and (index > 0 or (raw.isupper() and len(raw) > 1))
        word = NUMBER_WORDS.get(lowered, lowered)
        found.append(
            _Token(
                word,
                capitalized,
                code=not raw[0].isdigit() and not raw.isalpha() and _is_code(raw),
                keyed=starts_value,
                initial=raw[0].isupper(),
                value=_value(raw, word) if word[0].isdigit() else None,
            )
        )
    return found


def _denegated(tokens: list[_Token]) -> tuple[list[_Token], int]:
    """The tokens without negation (contractions opened, a "do" auxiliary that only carried
    the negation dropped, "no longer" read as "not", "still" dropped), and how many
    negations there were."""
    plain: list[_Token] = []
    negations = 0
    negated = False
    for token in tokens:
        opened = CONTRACTIONS.get(token.text)
        if opened is not None:
            negations += 1
            negated = True
            if opened not in DO_AUXILIARIES:
                plain.append(_Token(opened, capitalized=False))
            continue
        if token.text in NEGATORS:
            negations += 1
            negated = True
            continue
        if token.text in NEGATION_TAILS and negated:
            continue
        negated = False
        if token.text in DO_AUXILIARIES or token.text in NEUTRAL_ADVERBS:
            continue
        plain.append(token)
    return plain, negations


def _looks_nominal(tokens: list[_Token], index: int) -> bool:
    """A verb-like word after a determiner is a noun ("the run"), and so is a plural after
    a number ("3 projects"; but "build 1432 failed")."""
    before, word = tokens[index - 1].text, tokens[index].text
    return before in DETERMINERS or (before[0].isdigit() and word.endswith("s") and word not in VERBS)


def _verb_index(tokens: list[_Token]) -> int:
    """Where the predicate starts: the first auxiliary or copula after the first token; else
    the first known verb (not in a noun's place); else the word after a leading pronoun;
    else the first word that looks like a verb ("seats", "failed") after a word that is no
    determiner or number; else the end (the whole sentence is its subject)."""
    for index, token in enumerate(tokens):
        if index > 0 and token.text in AUXILIARIES and not (token.text == "may" and token.capitalized):
            return index  # (mid-sentence "May" is the month)
    for index, token in enumerate(tokens):
        if index > 0 and token.text in VERBS and not _looks_nominal(tokens, index):
            return index
    if len(tokens) > 1 and tokens[0].text in PRONOUNS:
        return 1
    for index in range(1, len(tokens)):
        word = tokens[index].text
        if (
            len(word) > 3
            and word.isalpha()
            and word.endswith(("s", "ed"))
            and not word.endswith("ss")
            and not _looks_nominal(tokens, index)
        ):
            return index
    return len(tokens)


def _subject_end(tokens: list[_Token]) -> int:
    """Where the subject ends: at the predicate, or earlier at a record's "key:"."""
    keyed = next((index for index, token in enumerate(tokens) if token.keyed), len(tokens))
    return min(_verb_index(tokens), keyed)


def _stem(text: str) -> str:
    """A verb's third-person "s" dropped, so "eats" meets "doesn't eat" (and "applies" meets
    "doesn't apply")."""
    if len(text) > 4 and text.endswith("ies"):
        return text[:-3] + "y"
    return text[:-1] if len(text) > 3 and text.endswith("s") and not text.endswith("ss") else text


def _inflects(word: str, stems: frozenset[str]) -> bool:
    """``word`` is one of ``stems`` or its inflection (supports, depended, blocked, listing)."""
    return any(
        word in (stem, stem + "s", stem + "es", stem + "d", stem + "ed", stem + "ing") for stem in stems
    )


def _is_past(word: str) -> bool:
    return word in PAST_IRREGULAR or (len(word) > 4 and word.isalpha() and word.endswith("ed"))


def _kind_in(tokens: list[_Token], start: int, end: int) -> str | None:
    """The kind of ``tokens[start:end]``, where a bare number beside a month is a date
    ("on 4 March" / "on 18 March", "February 2024" / "February 2025")."""
    kind = _kind(tokens[start:end])
    if kind == "number":
        beside = [tokens[i].text for i in (start - 1, end) if 0 <= i < len(tokens)]
        if any(word in MONTHS for word in beside):
            return "date"
    return kind


def _kind(tokens: list[_Token]) -> str | None:
    """What a changed span holds, when it is a value a frame can hold: a number, an ordinal,
    a date, a time, a name or place. None for common words (another meaning, or a
    paraphrase)."""
    texts = [t.text for t in tokens if t.text not in DETERMINERS]
    if not texts:
        return None
    if any((t[0].isdigit() and ":" in t) or (t.endswith(("am", "pm")) and t[0].isdigit()) for t in texts):
        return "time"
    if any(t in TIME_WORDS for t in texts):
        return "time"
    if any(t in WEEKDAYS or t in MONTHS or re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in texts):
        return "date"
    if any(t[0].isdigit() for t in texts):
        return "number"
    if any(t in ORDINALS for t in texts):
        return "ordinal"
    if all(t.capitalized or t.code for t in tokens if t.text not in DETERMINERS):
        return "name or place"
    return None


def _names_an_item(tokens: list[_Token], start: int, end: int) -> bool:
    """The span ``tokens[start:end]`` names an item rather than giving an amount: a name, a
    code, or a number right after a noun ("ticket 7712", "Python 3.12", "port 443"), where an
    amount follows a verb, a preposition or a determiner ("has 64 GB", "for 30 days")."""
    for index in range(start, end):
        token = tokens[index]
        if token.code or token.capitalized:
            return True
        if token.text[0].isdigit():
            if index == 0:
                return False
            before = tokens[index - 1].text
            return before.isalpha() and not (
                before in VERBS
                or before in AUXILIARIES
                or before in PREPOSITIONS
                or before in DETERMINERS
                or _is_past(before)
            )
    return False


def _same(a: list[_Token], b: list[_Token]) -> bool:
    return [_stem(t.text) for t in a] == [_stem(t.text) for t in b]


class RulesJudge:
    """The built-in judge: deterministic, explained, no model (see the module docstring)."""

    name = "rules"

    def judge(self, a: Statement, b: Statement) -> Judgement:
        slot = _slot(a, b)
        if slot is not None:
            return slot
        plain_a, plain_b = _denegated(_tokens(a.content)), _denegated(_tokens(b.content))
        return (
            _negation(plain_a, plain_b)
            or _frame(plain_a, plain_b)
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


def _prefix_negated(a: list[_Token], b: list[_Token]) -> tuple[int, int] | None:
    """When the two differ in one word only and one of the two is the other with a negating
    prefix ("paid" and "unpaid"): the extra negation of each side."""
    if len(a) != len(b):
        return None
    differing = [(x.text, y.text) for x, y in zip(a, b, strict=True) if _stem(x.text) != _stem(y.text)]
    if len(differing) != 1:
        return None
    x, y = differing[0]
    for prefix in NEGATIVE_PREFIXES:
        if len(y) >= 4 and x == prefix + y:
            return 1, 0
        if len(x) >= 4 and y == prefix + x:
            return 0, 1
    return None


def _negation(a: tuple[list[_Token], int], b: tuple[list[_Token], int]) -> Judgement | None:
    (plain_a, negations_a), (plain_b, negations_b) = a, b
    if len(plain_a) < 2:
        return None
    if not _same(plain_a, plain_b):
        prefixed = _prefix_negated(plain_a, plain_b)
        if prefixed is None:
            return None
        negations_a, negations_b = negations_a + prefixed[0], negations_b + prefixed[1]
    if negations_a % 2 == negations_b % 2:
        return Judgement(
            verdict="compatible", rule="negation", explanation="the same statement, negated alike"
        )
    return Judgement(verdict="contradiction", rule="negation", explanation="the same statement, once negated")


class _Change(msgspec.Struct, frozen=True):
    """One place where the two sentences differ: ``a[i1:i2]`` became ``b[j1:j2]``."""

    i1: int
    i2: int
    j1: int
    j2: int


def _changes(tokens_a: list[_Token], tokens_b: list[_Token]) -> list[_Change] | None:
    """Where the two sentences differ, when they share a frame: enough words in common, only
    words replaced (added or dropped words are a paraphrase or a detail: None), few words
    changed. The two ends of a range ("from 9:00 to 17:00") count as one change."""
    if max(len(tokens_a), len(tokens_b)) > MAX_FRAME_TOKENS:
        return None  # a frame is a sentence; comparing long texts word by word is quadratic
    texts_a, texts_b = [t.text for t in tokens_a], [t.text for t in tokens_b]
    matcher = difflib.SequenceMatcher(a=texts_a, b=texts_b, autojunk=False)
    shared = sum(block.size for block in matcher.get_matching_blocks())
    if shared < MIN_SHARED_TOKENS or shared < MIN_SHARED_SHARE * max(len(texts_a), len(texts_b)):
        return None
    opcodes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if not opcodes or any(op[0] != "replace" for op in opcodes):
        return None
    if sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in opcodes) > MAX_CHANGED_TOKENS:
        return None
    merged: list[_Change] = []
    for _, i1, i2, j1, j2 in opcodes:
        last = merged[-1] if merged else None
        if last is not None and i1 - last.i2 == 1 and texts_a[last.i2] in RANGE_JOINS:
            merged[-1] = _Change(last.i1, i2, last.j1, j2)
        else:
            merged.append(_Change(i1, i2, j1, j2))
    return merged


def _compatible(rule: str, explanation: str) -> Judgement:
    return Judgement(verdict="compatible", rule=rule, explanation=explanation)


def _contradiction(rule: str, explanation: str) -> Judgement:
    return Judgement(verdict="contradiction", rule=rule, explanation=explanation)


def _frame(a: tuple[list[_Token], int], b: tuple[list[_Token], int]) -> Judgement | None:
    (tokens_a, negations_a), (tokens_b, negations_b) = a, b
    if negations_a % 2 != negations_b % 2:
        return None  # a negated statement with another value: no sure rule
    changes = _changes(tokens_a, tokens_b)
    if changes is None:
        return None
    subject_a, subject_b = _subject_end(tokens_a), _subject_end(tokens_b)
    if any(c.i1 < subject_a or c.j1 < subject_b for c in changes):
        return _role(tokens_a, tokens_b, changes, subject_a) or _compatible(
            "different_subject", "the same frame about another subject"
        )
    verb = _verb_index(tokens_a)
    if len(changes) > 1:
        # a value that changed together with its qualifier ("at 6:00 on weekdays", "at 8:00 on
        # weekends") describes another item, day or period; unless the whole complement of
        # "is" changed ("step 1 is to freeze the branch" / "to run the tests")
        return _complement(tokens_a, tokens_b, changes, verb) or _compatible(
            "several_differences", "the same frame differing in more than one place: another item"
        )
    change = changes[0]
    span_a, span_b = tokens_a[change.i1 : change.i2], tokens_b[change.j1 : change.j2]
    if len(span_a) == 1 and len(span_b) == 1 and frozenset((span_a[0].text, span_b[0].text)) in ANTONYMS:
        return _contradiction("antonym", "the same statement with an opposite word")
    if _prepositions(span_a) != _prepositions(span_b):
        return _compatible("qualified", "one value carries a qualifier the other lacks")
    kind_a, kind_b = _kind_in(tokens_a, change.i1, change.i2), _kind_in(tokens_b, change.j1, change.j2)
    if kind_a is None or kind_a != kind_b:
        return _complement(tokens_a, tokens_b, changes, verb) if kind_a is None and kind_b is None else None
    reason = _another_item(tokens_a, tokens_b, change, verb, kind_a)
    if reason is not None:
        return _compatible("another_item", reason)
    return _contradiction("frame", f"the same frame with another {kind_a}")


def _prepositions(span: list[_Token]) -> int:
    return sum(1 for t in span if t.text in PREPOSITIONS and t.text not in RANGE_JOINS)


def _role(
    tokens_a: list[_Token], tokens_b: list[_Token], changes: list[_Change], subject: int
) -> Judgement | None:
    """Two names holding one definite role: "Priya is the team lead" and "Omar is the team
    lead" (a definite description has one referent)."""
    if len(changes) != 1 or subject >= len(tokens_a) - 1:
        return None
    change = changes[0]
    if change.i2 > subject or change.j2 > _subject_end(tokens_b):
        return None
    if tokens_a[subject].text not in COPULAS or tokens_a[subject + 1].text != "the":
        return None
    if not (_named(tokens_a[change.i1 : change.i2]) and _named(tokens_b[change.j1 : change.j2])):
        return None
    return _contradiction("role", "one role held by another name")


def _named(span: list[_Token]) -> bool:
    """A subject that is a name: capitalized words (the sentence's first included), none of
    them a determiner or a pronoun."""
    return bool(span) and all(
        t.initial and t.text.isalpha() and t.text not in DETERMINERS and t.text not in PRONOUNS for t in span
    )


def _complement(
    tokens_a: list[_Token], tokens_b: list[_Token], changes: list[_Change], verb: int
) -> Judgement | None:
    """The whole complement of "is" changed: "the default branch is the main branch" / "is
    the trunk", "step 1 is to freeze ..." / "is to run ...", or the agent of a passive ("is
    owned by the payments team" / "by the growth team"). A definite complement or an agent
    is the subject's one value; an adjective ("is fast", "is cheap") is not, so a bare
    complement is left alone."""
    if verb >= len(tokens_a) or tokens_a[verb].text not in COPULAS:
        return None
    if _verb_index(tokens_b) != verb or tokens_b[verb].text != tokens_a[verb].text:
        return None
    if any(
        _kind(tokens_a[c.i1 : c.i2]) is not None or _kind(tokens_b[c.j1 : c.j2]) is not None for c in changes
    ):
        return None
    lead = [t.text for t in tokens_a[verb + 1 : changes[0].i1]]
    definite = len(lead) == 1 and (lead[0] in {"the", "to"} or lead[0] in POSSESSIVES)
    agent = (
        len(lead) in (2, 3)
        and _is_past(lead[0])
        and lead[1] == "by"
        and (len(lead) == 2 or lead[2] in DETERMINERS)
    )
    if not (definite or agent):
        return None
    return _contradiction("complement", "the same subject with another value")


def _another_item(
    tokens_a: list[_Token], tokens_b: list[_Token], change: _Change, verb: int, kind: str
) -> str | None:
    """Why a same-frame difference is another item, not another value, or None."""
    span_a, span_b = tokens_a[change.i1 : change.i2], tokens_b[change.j1 : change.j2]
    range_a = [t.value for t in span_a if t.value is not None]
    range_b = [t.value for t in span_b if t.value is not None]
    ranged = any(t.text in RANGE_JOINS for t in span_a) and any(t.text in RANGE_JOINS for t in span_b)
    disjoint = (
        len(range_a) == 2
        and len(range_b) == 2
        and (max(range_a) < min(range_b) or max(range_b) < min(range_a))
    )
    if ranged and disjoint:
        return "two ranges that do not overlap: two occurrences"
    predicate = tokens_a[verb : change.i1]
    item = _names_an_item(tokens_a, change.i1, change.i2) and _names_an_item(tokens_b, change.j1, change.j2)
    if item and kind in ("number", "name or place"):
        if any(_inflects(t.text, INCLUSIVE_VERBS) for t in predicate):
            return "a predicate that holds for several items, with another item"
        if (
            len(predicate) > 1
            and predicate[0].text in HAVE
            and predicate[1].text not in DETERMINERS
            and not predicate[1].text[0].isdigit()
        ):
            return "a plural possession, with another item"
        numbered = all(not t.capitalized for t in span_a + span_b)
        if numbered and predicate and predicate[0].text not in AUXILIARIES and _is_past(predicate[0].text):
            return "a past action on another numbered item"
    if kind in ("date", "time") and any(t.text in INDEFINITES for t in predicate):
        return "an event of which there can be several, on another date"
    return None
