"""Text rules: normalization for dedupe, and the low-information test."""

from __future__ import annotations

import functools
import re
import unicodedata

_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
FILLER_WORDS = frozenset(
    {
        "ok",
        "okay",
        "k",
        "yes",
        "no",
        "yeah",
        "yep",
        "nope",
        "sure",
        "thanks",
        "thank",
        "you",
        "thx",
        "hi",
        "hello",
        "hey",
        "bye",
        "lol",
        "hmm",
        "hm",
        "uh",
        "um",
        "ah",
        "oh",
        "cool",
        "nice",
        "great",
        "good",
        "fine",
        "right",
        "test",
        "testing",
        "asdf",
    }
)
MIN_ALNUM_CHARACTERS = 3
# Punctuation that changes what a text means when it sits at an edge: "C#", "50%",
# and the sign of "-5" (also U+2212). Symbols ("$100", "€100", "C++", emoji) are never
# punctuation and stay as well.
_MEANINGFUL_EDGE_PUNCTUATION = frozenset("#%\u2030\u2031")
_SIGNS = frozenset("-\u2212")
_INVISIBLE = frozenset({"Cc", "Cf"})  # control and format characters: BOM, zero-width space
_MAX_PASSES = 8


def _strippable(text: str, index: int, start: int, end: int) -> bool:
    """Whether ``text[index]``, an edge of ``text[start:end]``, carries no meaning there."""
    char = text[index]
    category = unicodedata.category(char)
    if char.isspace() or category in _INVISIBLE:
        return True
    if not category.startswith("P"):
        return False
    if char in _MEANINGFUL_EDGE_PUNCTUATION:
        return False
    leading = index == start
    neighbour = index + 1 if leading else index - 1
    inner = text[neighbour] if start <= neighbour < end else ""
    if char in _SIGNS:
        # a sign ("-5") stays; a list bullet or dangling dash ("- item", "item -") goes
        return inner == "" or inner.isspace()
    # a leading decimal point (".5") stays
    return not (leading and char == "." and inner.isdigit())


def _strip_edges(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _strippable(text, start, start, end):
        start += 1
    while end > start and _strippable(text, end - 1, start, end):
        end -= 1
    return text[start:end]


def _normalize_once(text: str) -> str:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return _strip_edges(_SPACE.sub(" ", folded))


@functools.lru_cache(maxsize=16_384)
def normalize(text: str) -> str:
    """Canonical form used for exact dedupe: NFKC, case-folded, single spaces, no edge punctuation.

    Case folding can undo NFKC composition (``ß`` + accent folds to ``ss`` + accent, which
    composes again), so the steps repeat until the text is stable: ``normalize`` is
    idempotent, and equal texts always get equal claims.
    """
    current = text
    for _ in range(_MAX_PASSES):
        following = _normalize_once(current)
        if following == current:
            break
        current = following
    return current


def is_low_information(text: str) -> bool:
    """Too little to be worth remembering: almost no letters/digits, or only filler words."""
    words = _WORD.findall(normalize(text))
    if sum(len(w) for w in words) < MIN_ALNUM_CHARACTERS:
        return True
    return all(w in FILLER_WORDS for w in words)


CHARS_PER_TOKEN = 4


def estimate_tokens(text: str | None) -> int:
    """A model-free token estimate (about four characters a token), never below one:
    what budgets (search, assemble) are counted in."""
    return max(1, -(-len(text or "") // CHARS_PER_TOKEN))
