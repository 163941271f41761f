"""One identifier normal form (slots, subjects, attributes, source refs, dedupe keys,
namespaces): NFKC, case-folded, every Default_Ignorable_Code_Point dropped, and look-alike
words read as the words they imitate (UTS #39 prototypes). The stored text keeps what the
writer wrote; only matching uses the normal form."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.keys import check_actor_name
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.model.text import invisible_character, mixed_script, normalize, normalize_key, skeleton
from tests.unicode_tables import TARGET, module_source
from tests.unit.builders import AGENT, cmd, decide, memory, write_state

IGNORABLES = ["\ufe0f", "\ufe00", "\u034f", "\u180b", "\U000e0100", "\u2065", "\u200b", "\u00ad", "\u3164"]
CONFUSED = ["addr\u0435ss", "\u0430ddress", "addres\u0455", "\u0430ddr\u0435\u0455\u0455"]


def test_the_confusables_table_is_the_one_its_data_makes() -> None:
    assert TARGET.read_text() == module_source(), "run: python -m tests.unicode_tables"


@pytest.mark.parametrize("hidden", IGNORABLES)
def test_every_default_ignorable_is_invisible_and_dropped_from_keys(hidden: str) -> None:
    assert invisible_character(f"addr{hidden}ess") == hidden
    assert normalize_key(f"addr{hidden}ess") == "address"
    assert normalize(f"Dana lives at 12 Main{hidden} Street") == normalize("Dana lives at 12 Main Street")


@pytest.mark.parametrize("attribute", CONFUSED)
def test_look_alike_letters_name_the_same_slot(attribute: str) -> None:
    assert mixed_script(attribute) is not None or attribute.isascii()
    assert normalize_key(attribute) == "address"


def test_whole_words_of_another_script_keep_their_letters() -> None:
    for word in (
        "\u03c3\u03af\u03c3\u03c5\u03c6\u03bf\u03c3",
        "\u043f\u0440\u0438\u0432\u0435\u0442",
        "M\u00fcller",
    ):
        assert normalize_key(word) == unicodedata.normalize("NFKC", word).casefold()
    assert skeleton("\u0440\u0430\u0443\u0440\u0430l") == "paypal"  # wholly look-alikes of ASCII
    assert skeleton("server1 l0g") == "server1 l0g"  # ASCII keeps itself


@pytest.mark.parametrize("attribute", [*CONFUSED, *(f"addr{h}ess" for h in IGNORABLES)])
def test_a_lower_trust_write_on_a_look_alike_slot_is_disputed(attribute: str) -> None:
    manual = memory(subject="dana", attribute="address", value="12 Main Street", source="manual")
    command = cmd("Dana lives at 9 Elm Road", subject="dana", attribute=attribute, value="9 Elm Road")
    assert decide(command, write_state(slot=[manual]), identity=AGENT).outcome == "disputed"


@pytest.mark.parametrize(
    "namespace",
    ["acme/hr/\u200b", "acme/hr/bots\u200b", "acme/hr/bots\ufe0f", "\u0430cme/hr", "acme/p\u0430yroll"],
)
def test_namespaces_that_pass_for_others_are_refused(namespace: str) -> None:
    with pytest.raises(InvalidRequest, match=r"invisible|mixes"):
        validate_namespace(namespace)


def test_names_in_one_script_stay_valid() -> None:
    for namespace in (
        "acme/\u043a\u0430\u0434\u0440\u044b",
        "acme/\u6771\u4eac\u3072\u3089\u304c\u306a",
        "acme/m\u00fcller",
    ):
        assert validate_namespace(namespace) == namespace


def test_an_actor_name_that_mixes_scripts_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="mixes"):
        check_actor_name("b\u043et")


@given(st.text(max_size=40))
def test_the_normal_form_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)
    assert normalize_key(normalize_key(text)) == normalize_key(text)


@given(st.text(max_size=20), st.sampled_from(IGNORABLES), st.integers(min_value=0, max_value=20))
def test_an_ignorable_anywhere_changes_no_key(text: str, hidden: str, at: int) -> None:
    assert normalize_key(text[:at] + hidden + text[at:]) == normalize_key(text)
