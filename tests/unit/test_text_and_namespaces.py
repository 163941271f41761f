"""Text normalization (dedupe, slot values), the low-information test, and namespaces."""

from __future__ import annotations

import re

import pytest

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.namespaces import (
    MAX_DEPTH,
    MAX_NAMESPACE_LENGTH,
    ancestors,
    is_within,
    subtree_like_pattern,
    tenant_of,
    validate_namespace,
)
from memwarden.domain.model.text import is_low_information, normalize

# -- normalize ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Dana Lives In LISBON", "dana lives in lisbon"),
        ("Straße", "strasse"),  # case folding, not just lower()
        ("ΣΊΣΥΦΟΣ", "σίσυφοσ"),
        ("\uff24\uff21\uff2e\uff21", "dana"),  # NFKC: full-width letters
        ("ﬁle", "file"),  # NFKC: ligature
        ("Cafe\u0301", "café"),  # NFKC: composed accent
        ("x²", "x2"),
        ("  Dana\t\tlives \n in   Lisbon  ", "dana lives in lisbon"),
        ("Dana\u00a0lives\u2003here", "dana lives here"),  # unicode spaces
        ("Dana lives in Lisbon.", "dana lives in lisbon"),
        ('"Dana lives in Lisbon!"', "dana lives in lisbon"),
        ("¿Dónde? ¡Aquí!", "dónde? ¡aquí"),  # only the edges lose punctuation
        ("(see above)", "see above"),
        ("...and then", "and then"),
        ("- Dana lives in Lisbon", "dana lives in lisbon"),  # a list bullet
        ("• Dana lives in Lisbon", "dana lives in lisbon"),
        ("**Dana**", "dana"),
        ("Dana, Eli and Fay", "dana, eli and fay"),  # inner punctuation stays
        ("\ufeffDana lives in Lisbon\u200b", "dana lives in lisbon"),  # BOM, zero-width space
        ("!!!", ""),
        ("", ""),
    ],
)
def test_normalize(text: str, expected: str) -> None:
    assert normalize(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("-5", "5"),  # the sign of a number
        ("\u22125", "5"),
        (".5", "5"),  # a decimal point
        ("C#", "C"),
        ("C++", "C"),
        ("50%", "50"),
        ("$100", "100"),
        ("€100", "$100"),
        ("Dana likes 🍕", "Dana likes 🍔"),
        ("#general", "general"),
    ],
)
def test_normalize_keeps_edge_characters_that_carry_meaning(a: str, b: str) -> None:
    assert normalize(a) != normalize(b)


def test_normalize_is_idempotent_where_case_folding_undoes_composition() -> None:
    # "ß" + combining acute folds to "ss" + acute, which NFKC composes to "sś"
    once = normalize("aß\u0301b")
    assert normalize(once) == once
    assert once == "as\u015bb"


@pytest.mark.parametrize(
    "text", ["Dana Lives In Lisbon", "dana lives in lisbon.", " DANA  lives in\tLISBON!"]
)
def test_normalize_equal_variants(text: str) -> None:
    assert normalize(text) == normalize("dana lives in lisbon")


# -- is_low_information ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "ok",
        "OK!!",
        "ok thanks",
        "Thank you!",
        "yes yes yes",
        "hi",
        "?!...",
        "42",
        "a b",
        "lol 👍",
        "asdf",
        "hmm, ok",
        "__",
    ],
)
def test_low_information(text: str) -> None:
    assert is_low_information(text)


@pytest.mark.parametrize(
    "text",
    [
        "Dana is 42",
        "abc",
        "911",
        "Deploy window: Tue",
        "ok, the build is green",
        "東京都",
        "thanks to Dana the build is fixed",
    ],
)
def test_not_low_information(text: str) -> None:
    assert not is_low_information(text)


# -- namespaces -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "namespace",
    [
        "acme",
        "acme/eng",
        "acme/eng/platform",
        "a" * 64,
        "acme/" + "x/" * 14 + "y",
        "acme/team-ü_1.2",
        "acme/" + "e" * 64,
    ],
)
def test_valid_namespaces_are_returned_unchanged(namespace: str) -> None:
    assert validate_namespace(namespace) == namespace


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        ("", "non-empty"),
        ("acme/", "segment"),
        ("/acme", "segment"),
        ("acme//eng", "segment"),
        ("acme/e ng", "segment"),
        ("acme/\teng", "segment"),
        ("acme/e\x00ng", "segment"),
        ("acme/e\x1fng", "segment"),
        ("a" * 65, "segment"),
        ("acme/" + "x/" * 15 + "y", "deeper"),
        ("a/" * 127 + "bc", "longer"),
        ("acme\n", "segment"),  # a trailing newline is not part of a valid segment
        ("acme/eng\n", "segment"),
    ],
)
def test_invalid_namespaces(namespace: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        validate_namespace(namespace)


def test_limits() -> None:
    assert MAX_DEPTH == 16
    assert len("a/" * 127 + "bc") > MAX_NAMESPACE_LENGTH


def test_validate_namespace_refuses_a_non_string() -> None:
    with pytest.raises(InvalidRequest):
        validate_namespace(None)  # type: ignore[arg-type]


def test_ancestors_nearest_first() -> None:
    assert ancestors("acme/eng/platform") == ("acme/eng/platform", "acme/eng", "acme")
    assert ancestors("acme") == ("acme",)


def test_a_prefix_is_not_an_ancestor() -> None:
    assert "acme/eng" not in ancestors("acme/engineering")
    assert ancestors("acme/engineering") == ("acme/engineering", "acme")


def test_tenant_of() -> None:
    assert tenant_of("acme/eng/platform") == "acme"
    assert tenant_of("acme") == "acme"


@pytest.mark.parametrize(
    ("namespace", "root", "within"),
    [
        ("acme/eng", "acme/eng", True),
        ("acme/eng/platform", "acme/eng", True),
        ("acme/eng/platform/db", "acme", True),
        ("acme/engineering", "acme/eng", False),
        ("acme/eng", "acme/eng/platform", False),
        ("acme", "acme/eng", False),
        ("acmeco/eng", "acme", False),
        ("globex/eng", "acme", False),
    ],
)
def test_is_within(namespace: str, root: str, within: bool) -> None:
    assert is_within(namespace, root) is within


def like(pattern: str, value: str) -> bool:
    """SQL LIKE with escape character ``\\``, enough to check the pattern's meaning."""
    regex, i = "", 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 1
            regex += re.escape(pattern[i])
        elif char == "%":
            regex += ".*"
        elif char == "_":
            regex += "."
        else:
            regex += re.escape(char)
        i += 1
    return re.fullmatch(regex, value, re.DOTALL) is not None


@pytest.mark.parametrize(
    ("root", "pattern"),
    [
        ("acme/eng", "acme/eng/%"),
        ("acme/my_team", "acme/my\\_team/%"),
        ("acme/100%", "acme/100\\%/%"),
        ("acme/back\\slash", "acme/back\\\\slash/%"),
        ("a_b%c\\d", "a\\_b\\%c\\\\d/%"),
    ],
)
def test_subtree_like_pattern_escapes(root: str, pattern: str) -> None:
    assert subtree_like_pattern(root) == pattern


@pytest.mark.parametrize(
    ("root", "value", "matches"),
    [
        ("acme/eng", "acme/eng/platform", True),
        ("acme/eng", "acme/eng", False),  # strict descendants only
        ("acme/eng", "acme/engineering/x", False),
        ("acme/my_team", "acme/my_team/x", True),
        ("acme/my_team", "acme/myXteam/x", False),  # "_" is not a wildcard
        ("acme/100%", "acme/100%/x", True),
        ("acme/100%", "acme/1000/x", False),  # "%" is not a wildcard
        ("acme/back\\slash", "acme/back\\slash/x", True),
        ("acme/back\\slash", "acme/backslash/x", False),
    ],
)
def test_subtree_like_pattern_matches_strict_descendants_only(root: str, value: str, matches: bool) -> None:
    assert like(subtree_like_pattern(root), value) is matches
