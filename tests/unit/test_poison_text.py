"""Poison in the domain: text PostgreSQL cannot store (NUL, lone surrogates), invisible
characters and fillers, dash variants, times outside years 1-9999 in UTC, and path
operators as namespace segments. The deciders refuse what the HTTP edge refuses, so no
way around the edge (CLI, import, a service called in-process) can append it."""

from __future__ import annotations

import argparse
import re
import unicodedata
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memwarden.api.cli.timetravel import parse_time
from memwarden.api.http.body import MAX_JSON_DEPTH, identity_named, nests_deeper_than
from memwarden.domain.model.commands import VerifyMemory, WriteMemory
from memwarden.domain.model.erasure import Forget, names_subject, subject_keys
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import Directive
from memwarden.domain.model.keys import IssueKey, decide_issue
from memwarden.domain.model.knowledge import KnowledgeDraft, verify_document
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.model.policies import PolicyBody, decide_set_policy
from memwarden.domain.model.storable import check_storable, unstorable_field
from memwarden.domain.model.text import (
    escape_unprintable,
    invisible_character,
    is_low_information,
    normalize,
    normalize_key,
    quote_text,
    storable_text_problem,
)
from memwarden.domain.model.times import parse_time_text, time_problem
from memwarden.domain.model.verification import decide_verify
from memwarden.domain.services.audit import MAX_DETAIL, safe_detail
from tests.unit.builders import ADMIN, AGENT, OTHER_AGENT, POLICY, T0, cmd, decide, memory, write_state
from tests.unit.test_disputes_decider import Scenario
from tests.unit.test_erasure_decider import forget

NUL = "nul \u0000 here"
SURROGATE = "lone \ud800 surrogate"
YEAR_ZERO = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))  # 0000-12-31T23:00Z
YEAR_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))

# -- the one rule for text ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("fine text, ünïcödé, 東京, emoji 🍕", None),
        ("", None),
        (NUL, "contains a NUL character (U+0000)"),
        ("\u0000", "contains a NUL character (U+0000)"),
        (SURROGATE, "contains a lone surrogate (U+D800), which is not valid UTF-8"),
        ("\udfff", "contains a lone surrogate (U+DFFF), which is not valid UTF-8"),
        ("\U0001f355", None),  # a real astral character is no surrogate
    ],
)
def test_storable_text_problem(text: str, problem: str | None) -> None:
    assert storable_text_problem(text) == problem
    if problem is None:
        text.encode("utf-8")  # what PostgreSQL will be handed


def test_the_walk_names_the_field_and_never_quotes_it() -> None:
    command = cmd("Dana lives in Lisbon", tags=("ok", NUL))
    assert unstorable_field(command) == "tags[1] contains a NUL character (U+0000)"
    assert unstorable_field(cmd("x", ref=SURROGATE)) == (
        "provenance.ref contains a lone surrogate (U+D800), which is not valid UTF-8"
    )
    assert unstorable_field({"items": [{"content": "a"}, {"content": NUL}]}) == (
        "items[1].content contains a NUL character (U+0000)"
    )
    assert (
        unstorable_field({"id": 1, "\u0000": 1})
        == "a field name in the body contains a NUL character (U+0000)"
    )
    assert unstorable_field(cmd("x", valid_from=YEAR_ZERO)) == (
        "valid_from is outside years 1-9999 once converted to UTC"
    )
    assert unstorable_field(cmd("Dana lives in Lisbon", tags=("a", "b"))) is None


def test_the_walk_reaches_any_depth_without_recursion() -> None:
    deep: object = NUL
    for _ in range(50_000):
        deep = [deep]
    found = unstorable_field({"x": deep})
    assert found is not None
    assert found.startswith("x[0][0]")
    assert found.endswith("contains a NUL character (U+0000)")
    with pytest.raises(InvalidRequest, match="contains a NUL"):
        check_storable({"x": deep})


# -- the deciders ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (cmd(NUL), "content"),
        (cmd(SURROGATE), "content"),
        (cmd("Dana lives in Lisbon", tags=("ok", SURROGATE)), "tags[1]"),
        (cmd("Dana lives in Lisbon", selectors=(NUL,)), "selectors[0]"),
        (cmd("Dana lives in Lisbon", subject=NUL, attribute="city", value="Lisbon"), "subject"),
        (cmd("Dana lives in Lisbon", subject="dana", attribute=SURROGATE, value="Lisbon"), "attribute"),
        (cmd("Dana lives in Lisbon", subject="dana", attribute="city", value=NUL), "value"),
        (cmd("Dana lives in Lisbon", ref=NUL), "provenance.ref"),
        (cmd("Dana lives in Lisbon", valid_from=YEAR_ZERO), "valid_from"),
        (cmd("Dana lives in Lisbon", event_time=YEAR_10000), "event_time"),
    ],
)
def test_the_write_decider_rejects_what_cannot_be_stored(command: WriteMemory, field: str) -> None:
    decision = decide(command)
    assert decision.outcome == "rejected"
    assert decision.events == ()
    assert [r.reason for r in decision.rejected] == ["unstorable"]
    assert decision.rejected[0].detail.startswith(f"{field} ")
    assert decision.rejected[0].detail.isprintable()


def test_the_write_decider_still_stores_the_edges_of_the_range() -> None:
    for moment in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)):
        assert decide(cmd("Dana lives in Lisbon", valid_from=moment)).outcome == "stored"


def test_the_verification_decider_refuses_a_poisoned_note() -> None:
    target = memory(actor="agent-a")
    with pytest.raises(InvalidRequest, match=r"^note contains a NUL"):
        decide_verify(VerifyMemory(memory_id=target.id, supports=True, note=NUL), OTHER_AGENT, target, T0)


def test_the_dispute_decider_refuses_a_poisoned_edit_or_reason() -> None:
    scenario = Scenario()
    with pytest.raises(InvalidRequest, match=r"^content contains a NUL"):
        scenario.resolve("edit", content=NUL)
    with pytest.raises(InvalidRequest, match=r"^reason contains a lone surrogate"):
        scenario.resolve("keep_old", reason=SURROGATE)
    assert scenario.dispute.status == "open"


def test_the_forget_decider_refuses_a_poisoned_reason_or_subject() -> None:
    with pytest.raises(InvalidRequest, match=r"^reason contains a NUL"):
        forget(ADMIN, Forget(subtree=".", reason=NUL))
    with pytest.raises(InvalidRequest, match=r"^subject contains a lone surrogate"):
        forget(ADMIN, Forget(subject=SURROGATE, reason="offboarding"))


def test_the_key_decider_refuses_a_poisoned_actor_or_target() -> None:
    owner = ADMIN
    with pytest.raises(InvalidRequest, match=r"^actor contains a lone surrogate"):
        decide_issue(owner, IssueKey(target=owner.namespace, actor=SURROGATE, role="agent"), "k", "h", T0)
    with pytest.raises(InvalidRequest, match=r"^target contains a NUL"):
        decide_issue(owner, IssueKey(target=NUL, actor="bot", role="agent"), "k", "h", T0)


def test_the_policy_decider_refuses_a_poisoned_directive() -> None:
    body = PolicyBody(directives=(Directive(id="d1", text=NUL),))
    with pytest.raises(InvalidRequest, match=r"^directives\[0\]\.text contains a NUL"):
        decide_set_policy(ADMIN, ADMIN.namespace, body, None, None, T0)


def test_knowledge_refuses_a_poisoned_document_or_file_name() -> None:
    draft = KnowledgeDraft(title="Runbook", slug="runbook", body=f"Restart the {NUL} service", source="a.md")
    with pytest.raises(InvalidRequest, match=r"^'a.md': body contains a NUL"):
        verify_document(draft, POLICY)
    undecodable = KnowledgeDraft(title="Runbook", slug="runbook", body="Restart it", source="b\udcff.md")
    with pytest.raises(InvalidRequest, match="source contains a lone surrogate") as refused:
        verify_document(undecodable, POLICY)
    assert refused.value.detail.isprintable()


# -- audit details and messages never carry raw caller text ------------------------------


def test_quoting_escapes_everything_unprintable() -> None:
    assert quote_text("a\u0000b\ud800'c") == "'a\\x00b\\ud800\\'c'"
    assert quote_text("x" * 100, 10) == "'" + "x" * 10 + "'…"
    assert escape_unprintable("tab\there") == "tab\\there"
    assert escape_unprintable("plain ünïcödé") == "plain ünïcödé"


def test_an_audit_detail_is_always_storable_and_bounded() -> None:
    detail = safe_detail("invalid_request: Object contains unknown field `\u0000\ud800`" + "x" * 500)
    assert storable_text_problem(detail) is None
    assert detail.isprintable()
    assert "\\x00" in detail
    assert "\\ud800" in detail
    assert len(detail) <= MAX_DETAIL


# -- identity-bearing text: one normal form ----------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        "db\u200b-host",  # zero-width space inside
        "d\u00adb-host",  # soft hyphen inside
        "db\u2010host",  # hyphen
        "db\u2011host",  # non-breaking hyphen
        "db\u2013host",  # en dash
        "db\u2212host",  # minus sign
        "DB-HOST",
        "\uff24\uff22-host",  # full width
        "db-\u2060host\ufeff",  # word joiner, BOM
        "db\u3164-host",  # Hangul filler
        "db-\u115fho\u1160st\uffa0",
    ],
)
def test_slot_spellings_that_look_alike_collide(spelling: str) -> None:
    assert normalize_key(spelling) == normalize_key("db-host") == "db-host"


def test_invisible_characters_go_everywhere_in_dedupe_text() -> None:
    assert normalize("pri\u00admary data\u200bbase") == "primary database"
    assert normalize("Dana\u200d lives\u2060 in Lisbon") == "dana lives in lisbon"
    assert normalize("a\u2013b") == "a\u2013b"  # dashes fold only in identity keys (slots, refs)


@pytest.mark.parametrize(
    "content", ["\u3164\u115f\u1160", "\u3164" * 40, "\u200b\u200c\u200d\u2060", "o\u00adk", "\uffa0ab\u200b"]
)
def test_only_visible_characters_count_as_information(content: str) -> None:
    assert is_low_information(content)
    decision = decide(cmd(content))
    assert decision.outcome == "rejected"
    assert [r.reason for r in decision.rejected] == ["low_information"]


def test_a_lower_trust_write_on_a_respelled_slot_is_disputed() -> None:
    manual = memory(subject="db-host", attribute="primary", value="db1", source="manual")
    for subject, attribute in (
        ("db\u200b-host", "primary"),
        ("db-host", "pri\u00admary"),
        ("db\u2010host", "primary"),
    ):
        command = cmd("The primary database host is db9", subject=subject, attribute=attribute, value="db9")
        decision = decide(command, write_state(slot=[manual]), identity=AGENT)
        assert decision.outcome == "disputed", (subject, attribute)


# -- namespaces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "namespace", [".", "..", "acme/.", "acme/..", "acme/./eng", "acme/../x", "acme//eng"]
)
def test_path_operators_and_empty_segments_are_refused(namespace: str) -> None:
    with pytest.raises(InvalidRequest, match="segment"):
        validate_namespace(namespace)


def test_a_namespace_with_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(InvalidRequest, match="lone surrogate"):
        validate_namespace("acme/e\udc80ng")


def test_dots_inside_a_segment_stay_valid() -> None:
    for namespace in ("acme/.hidden", "acme/v1.2", "acme/...", "acme/a..b"):
        assert validate_namespace(namespace) == namespace


# -- times ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-01T09:30:00Z", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
        ("2026-03-01t09:30:00z", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
        ("2026-03-01T10:30:00+01:00", datetime(2026, 3, 1, 9, 30, tzinfo=UTC)),
        ("0001-01-01", datetime(1, 1, 1, tzinfo=UTC)),
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ],
)
def test_the_time_forms_of_the_api(text: str, expected: datetime) -> None:
    assert parse_time_text(text) == expected
    assert parse_time(text) == expected  # the CLI reads the same forms


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0001-01-01T00:00:00+01:00", "outside years 1-9999"),
        ("9999-12-31T23:59:59-01:00", "outside years 1-9999"),
        ("2026-03-01T09:30:00", "no time zone"),
        ("2026-13-01", "not a time"),
        ("yesterday", "not a time"),
        ("2026-03-01\u0000", "not a time"),
        ("2" * 100, "longer than"),
    ],
)
def test_times_that_cannot_be_stored_are_refused(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as refused:
        parse_time_text(text)
    assert "\u0000" not in str(refused.value)
    with pytest.raises(argparse.ArgumentTypeError, match=problem):
        parse_time(text)


def test_time_problem() -> None:
    assert time_problem(YEAR_ZERO) == "is outside years 1-9999 once converted to UTC"
    assert time_problem(YEAR_10000) == "is outside years 1-9999 once converted to UTC"
    assert time_problem(datetime(2026, 3, 1)) is not None  # naive on purpose
    assert time_problem(datetime(2026, 3, 1, tzinfo=UTC)) is None


# -- bodies: depth and identity names, without recursion ----------------------------------


def test_nesting_depth_counts_brackets_outside_strings_only() -> None:
    assert not nests_deeper_than(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH, MAX_JSON_DEPTH)
    assert nests_deeper_than(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), MAX_JSON_DEPTH)
    assert nests_deeper_than(b'{"a":' * 1000 + b"1" + b"}" * 1000, MAX_JSON_DEPTH)
    in_strings = b'{"content": "' + b"[{" * 500 + b'\\" [[[[", "tags": ["[[[["]}'
    assert not nests_deeper_than(in_strings, 2)


def test_identity_names_are_found_at_any_depth_without_recursion() -> None:
    deep: object = {"actor": "mallory"}
    for _ in range(50_000):
        deep = [deep]
    assert identity_named({"content": "x", "items": deep}, frozenset()) == "actor"
    assert identity_named({"actor": "x"}, frozenset({"actor"})) is None
    assert identity_named({"nested": {"actor": "x"}}, frozenset({"actor"})) == "actor"


# -- properties ------------------------------------------------------------------------------


# any text, surrogates and NUL included (st.text leaves surrogates out), with the poison
# this file is about drawn often
POISON = ["\x00", "\ud800", "\udbff", "\udc00", "\udfff", "\u200b", "\u00ad", "\u3164", "\u2010", "\ufeff"]
any_text = st.text(alphabet=st.characters() | st.sampled_from(POISON))


@given(any_text)
def test_the_text_rules_are_total_and_normalize_is_idempotent_and_visible(text: str) -> None:
    storable_text_problem(text)
    is_low_information(text)
    quote_text(text)
    once = normalize(text)
    key = normalize_key(text)
    assert normalize(once) == once
    assert normalize_key(key) == key
    for folded in (once, key):
        assert not any(unicodedata.category(c) == "Cf" for c in folded)
        assert not set(folded) & set("\u3164\u115f\u1160\uffa0")
    assert escape_unprintable(text).isprintable()


@given(any_text)
def test_surrogates_and_nul_are_always_found(text: str) -> None:
    bad = "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    assert (storable_text_problem(text) is not None) == bad
    if not bad:
        text.encode("utf-8")


@pytest.mark.parametrize("subject", ["\u200b", "\u3164\u00ad", "!!!", "\u2010"])
def test_a_slot_of_nothing_visible_is_refused(subject: str) -> None:
    with pytest.raises(InvalidRequest, match="subject must have a visible"):
        decide(cmd("The primary database host is db9", subject=subject, attribute="primary", value="db9"))
    with pytest.raises(InvalidRequest, match="attribute must have a visible"):
        decide(cmd("The primary database host is db9", subject="db-host", attribute=subject, value="db9"))


def test_erasure_by_subject_finds_every_respelling() -> None:
    keys = subject_keys("Dana-Lee")
    for subject, tags in (
        ("dana\u2010lee", ()),
        ("DANA-LEE", ()),
        (None, ("stakeholder:da\u200bna-lee",)),
        (None, ("stakeholder:dana\u00ad-lee",)),
    ):
        target = memory(subject=subject, attribute="city" if subject else None, tags=tags)
        assert names_subject(target, keys), (subject, tags)
    assert not names_subject(memory(subject="dana-leo", attribute="city"), keys)


INVISIBLE_ACTORS = {
    "zero-width space": ("bot\u200b", "U+200B"),
    "byte order mark": ("\ufeffbot", "U+FEFF"),
    "right-to-left override": ("bot\u202etxt", "U+202E"),
    "left-to-right isolate": ("\u2066bot", "U+2066"),
    "right-to-left mark": ("bot\u200f", "U+200F"),
    "soft hyphen": ("b\u00adot", "U+00AD"),
    "word joiner": ("b\u2060ot", "U+2060"),
    "Hangul filler": ("bot\u3164", "U+3164"),
    "delete": ("bot\x7f", "U+007F"),
    "C1 control": ("bot\x9b", "U+009B"),
}


@pytest.mark.parametrize(("actor", "code"), INVISIBLE_ACTORS.values(), ids=INVISIBLE_ACTORS.keys())
def test_the_key_decider_refuses_an_actor_with_an_invisible_character(actor: str, code: str) -> None:
    command = IssueKey(target=ADMIN.namespace, actor=actor, role="agent")
    with pytest.raises(InvalidRequest, match=re.escape(f"actor contains an invisible character ({code})")):
        decide_issue(ADMIN, command, "k", "h", T0)


@pytest.mark.parametrize(
    ("actor", "problem"),
    [
        ("b\x00ot", r"^actor contains a NUL"),
        ("b\ud800ot", r"^actor contains a lone surrogate \(U\+D800\)"),
        ("b\udfffot", r"^actor contains a lone surrogate \(U\+DFFF\)"),
        ("two words", r"^actor must be 1-128"),
        ("", r"^actor must be 1-128"),
        ("x" * 129, r"^actor must be 1-128"),
    ],
)
def test_the_key_decider_refuses_unstorable_or_spaced_actors(actor: str, problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        decide_issue(ADMIN, IssueKey(target=ADMIN.namespace, actor=actor, role="agent"), "k", "h", T0)


@pytest.mark.parametrize("actor", ["bot", "dana@acme.example", "Ørjan", "李雷", "ci-bot_2", "🤖", "é" * 128])
def test_visible_actor_names_are_accepted(actor: str) -> None:
    issued = decide_issue(ADMIN, IssueKey(target=ADMIN.namespace, actor=actor, role="agent"), "k", "h", T0)
    assert issued.actor == actor


@given(st.text(min_size=1, max_size=40))
def test_invisible_character_finds_exactly_what_normalize_drops(text: str) -> None:
    found = invisible_character(text)
    if found is None:
        assert all(c.isspace() or unicodedata.category(c) not in {"Cc", "Cf"} for c in text)
    else:
        assert found in text
        assert normalize(f"a{found}b") == "ab"
