"""Text rules: normalization for dedupe, and the low-information test."""

from __future__ import annotations

import re
import unicodedata

_SPACE = re.compile(r"\s+")
_EDGE_PUNCT = re.compile(r"^[\s\W_]+|[\s\W_]+$")
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


def normalize(text: str) -> str:
    """Canonical form used for exact dedupe: NFKC, case-folded, single spaces, no edge punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _EDGE_PUNCT.sub("", _SPACE.sub(" ", folded))


def is_low_information(text: str) -> bool:
    """Too little to be worth remembering: almost no letters/digits, or only filler words."""
    words = _WORD.findall(normalize(text))
    if sum(len(w) for w in words) < MIN_ALNUM_CHARACTERS:
        return True
    return all(w in FILLER_WORDS for w in words)
