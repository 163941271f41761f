"""Text rules: what text may be stored at all, normalization for dedupe and slots, the
low-information test, and safe quoting of caller text in messages."""

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
# Fillers render as nothing but are letters (category Lo/Mn), so no category catches them.
_FILLERS = frozenset("\u115f\u1160\u17b4\u17b5\u3164\uffa0")
# Dash variants spelled differently in identity-bearing text (slots, refs) mean "-".
_DASHES = str.maketrans(dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"))
_MAX_PASSES = 8
_SURROGATES = re.compile("[\ud800-\udfff]")


def storable_text_problem(text: str) -> str | None:
    """Why PostgreSQL text cannot hold ``text`` (a NUL, a lone surrogate), or None when it can.

    The one rule for text at every way in (HTTP, CLI, import) and in the deciders. The
    answer never quotes the text itself, so it is safe to put in an error or an audit record.
    """
    if "\x00" in text:
        return "contains a NUL character (U+0000)"
    surrogate = _SURROGATES.search(text)
    if surrogate is not None:
        return f"contains a lone surrogate (U+{ord(surrogate.group()):04X}), which is not valid UTF-8"
    return None


def quote_text(text: str, limit: int = 60) -> str:
    """Caller text made safe to show in an error or an audit record: at most ``limit``
    characters, quoted, with everything not printable escaped (NUL, surrogates, controls)."""
    clipped = text[:limit]
    quoted = "'" + escape_unprintable(clipped).replace("'", "\\'") + "'"
    return quoted + ("…" if len(text) > limit else "")


def escape_unprintable(text: str) -> str:
    """``text`` with every character that is not printable written as its escape (``\\x00``)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _invisible(char: str) -> bool:
    if char in _FILLERS:
        return True
    return unicodedata.category(char) in _INVISIBLE and not char.isspace()


def invisible_character(text: str) -> str | None:
    """The first character of ``text`` that renders as nothing, or None: a control or format
    character (zero-width space U+200B, BOM U+FEFF, soft hyphen, bidi controls) or a Hangul
    filler; what ``normalize`` drops, so two texts that differ only by one look the same.
    Whitespace is not counted (it is visible as a gap)."""
    if text.isprintable() and _FILLERS.isdisjoint(text):  # every invisible one is either
        return None
    return next((c for c in text if _invisible(c)), None)


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


def _normalize_once(text: str, *, dashes: bool) -> str:
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    if dashes:
        folded = folded.translate(_DASHES)
    spaced = _SPACE.sub(" ", folded)
    # every invisible character is unprintable or a filler: most text skips the slow walk
    if not (spaced.isprintable() and _FILLERS.isdisjoint(spaced)):
        spaced = _SPACE.sub(" ", "".join(c for c in spaced if not _invisible(c)))
    return _strip_edges(spaced)


def _normalized(text: str, *, dashes: bool) -> str:
    current = text
    for _ in range(_MAX_PASSES):
        following = _normalize_once(current, dashes=dashes)
        if following == current:
            break
        current = following
    return current


@functools.lru_cache(maxsize=16_384)
def normalize(text: str) -> str:
    """Canonical form used for exact dedupe: NFKC, case-folded, single spaces, no edge
    punctuation, and no invisible character anywhere (format characters such as zero-width
    space or soft hyphen, controls, Hangul fillers): text that looks the same is the same.

    Case folding can undo NFKC composition (``ß`` + accent folds to ``ss`` + accent, which
    composes again), so the steps repeat until the text is stable: ``normalize`` is
    idempotent, and equal texts always get equal claims.
    """
    return _normalized(text, dashes=False)


@functools.lru_cache(maxsize=16_384)
def normalize_key(text: str) -> str:
    """Canonical form of identity-bearing text (a slot's subject and attribute, a source
    ref): ``normalize``, with every dash variant (U+2010..U+2015, minus U+2212) read as "-",
    so ``db\\u2010host`` and ``db-host`` name the same slot. Idempotent, like ``normalize``."""
    return _normalized(text, dashes=True)


def is_low_information(text: str) -> bool:
    """Too little to be worth remembering: almost no visible letters/digits, or only filler
    words. Invisible characters count for nothing (``normalize`` drops them)."""
    words = _WORD.findall(normalize(text))
    if sum(len(w) for w in words) < MIN_ALNUM_CHARACTERS:
        return True
    return all(w in FILLER_WORDS for w in words)


CHARS_PER_TOKEN = 4


def estimate_tokens(text: str | None) -> int:
    """A model-free token estimate (about four characters a token), never below one:
    what budgets (search, assemble) are counted in."""
    return max(1, -(-len(text or "") // CHARS_PER_TOKEN))
