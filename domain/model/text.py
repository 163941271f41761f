"""Text rules: what text may be stored at all, normalization for dedupe and slots, the
low-information test, and safe quoting of caller text in messages."""

from __future__ import annotations

import functools
import re
import unicodedata

from memwarden.domain.model.confusables import PROTOTYPES

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
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15.1): what
# renders as nothing whatever its category. Categories alone miss the variation selectors and
# the grapheme joiner (Mn), the Hangul fillers (Lo) and unassigned ignorables such as U+2065
# (Cn), and Python's unicodedata lacks the property.
_DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_FILLERS = frozenset(
    chr(code) for low, high in _DEFAULT_IGNORABLE for code in range(low, high + 1) if chr(code).isprintable()
)
"""The default-ignorable characters that ``str.isprintable`` calls printable (fillers,
variation selectors, the grapheme joiner): the ones the quick printable test cannot rule out."""
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
    if char in _FILLERS or _default_ignorable(char):
        return True
    return unicodedata.category(char) in _INVISIBLE and not char.isspace()


def _default_ignorable(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _DEFAULT_IGNORABLE)


def invisible_character(text: str) -> str | None:
    """The first character of ``text`` that renders as nothing, or None: a control or format
    character (zero-width space U+200B, BOM U+FEFF, soft hyphen, bidi controls) or any other
    default-ignorable code point (variation selectors, the grapheme joiner, Hangul fillers,
    tags); what ``normalize`` drops, so two texts that differ only by one look the same.
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


def skeleton(text: str) -> str:
    """``text`` with every look-alike word read as the word it imitates (UTS #39 prototypes
    from confusables.txt): a word that mixes scripts (``address`` with a Cyrillic e), or one
    written wholly in look-alikes of ASCII (``paypal`` in Cyrillic). Other words keep their
    letters, so Greek or Cyrillic text is never folded onto Latin look-alikes of its own
    letters; ASCII keeps itself, so keys claimed in ASCII keep their claims."""
    if text.isascii():
        return text
    return _WORD.sub(_word_skeleton, text)


def _word_skeleton(match: re.Match[str]) -> str:
    word = match.group()
    if word.isascii():
        return word
    imitated = "".join(PROTOTYPES.get(char, char) for char in word)
    return imitated if imitated.isascii() or _mixes_scripts(word) else word


_EAST_ASIAN = frozenset({"CJK", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO", "IDEOGRAPHIC"})
"""Scripts that one word legitimately mixes (Japanese, Korean, Chinese): one script here."""


def _script(char: str) -> str | None:
    """A letter's script, as the first word of its Unicode name (``LATIN``, ``CYRILLIC``);
    None for what is not a letter (digits, marks and punctuation belong to every script)."""
    if not unicodedata.category(char).startswith("L") or _invisible(char):
        return None  # a Hangul filler is a letter (Lo) of no script anyone sees
    script = unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]
    return "CJK" if script in _EAST_ASIAN else script


def mixed_script(text: str) -> tuple[str, str] | None:
    """The first two scripts one word of ``text`` mixes (``paypal`` with a Cyrillic ``a``:
    LATIN and CYRILLIC), or None: a word written in two scripts is a look-alike, never a name
    anyone types."""
    if text.isascii():
        return None
    for word in _WORD.findall(unicodedata.normalize("NFKC", text)):
        scripts = _scripts(word)
        if len(scripts) > 1:
            first, second = sorted(scripts)[:2]
            return first, second
    return None


def _scripts(word: str) -> set[str]:
    return {script for script in map(_script, word) if script is not None}


def _mixes_scripts(word: str) -> bool:
    return len(_scripts(word)) > 1


def _without_invisibles(text: str) -> str:
    # every invisible character is unprintable or a filler: most text skips the slow walk
    if text.isprintable() and _FILLERS.isdisjoint(text):
        return text
    return "".join(c for c in text if not _invisible(c))


def _normalize_once(text: str, *, dashes: bool) -> str:
    # invisibles go before the skeleton: one between two letters must not split a word in two
    visible = _without_invisibles(unicodedata.normalize("NFKC", text).casefold())
    folded = unicodedata.normalize("NFKC", skeleton(visible))
    folded = folded.casefold()  # a prototype may be a capital (Greek capital alpha reads as A)
    if dashes:
        folded = folded.translate(_DASHES)
    return _strip_edges(_SPACE.sub(" ", _without_invisibles(folded)))


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
    """Canonical form used for exact dedupe: NFKC, case-folded, confusables read as their
    prototypes (``skeleton``), single spaces, no edge punctuation, and no invisible character
    anywhere (every default-ignorable code point, controls): text that looks the same is the
    same. The stored text keeps what the writer wrote; only claims and matching use this.

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
