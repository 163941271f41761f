"""No plaintext in the ledger; crypto-shredding; bad input leaves only an audit record."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

import msgspec
import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.errors import DomainError, Forbidden, InvalidRequest, ProvenanceNotAllowed
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import WriteResult
from memwarden.domain.settings import SCHEMA, Settings

AGENT = Identity("acme/eng", "agent-1", "agent", "document")
MEMBER = Identity("acme/eng", "dana", "member")
AUDITOR = Identity("acme/eng", "audrey", "auditor")
EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
DATA_KEYS = SQL("{}.data_keys").format(Identifier(SCHEMA))


def marker() -> str:
    return f"zqx{uuid4().hex}qxz"


def all_states(core: Core) -> list[tuple[int, str, bytes]]:
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        rows = conn.execute(SQL("SELECT notification_id, topic, state FROM {} ORDER BY 1").format(EVENTS))
        return [(p, t, bytes(s)) for p, t, s in rows]


def tables_holding(core: Core, needle: str) -> list[str]:
    """Every user table (any schema) whose rows, as text, contain the needle or its hex."""
    hexed = needle.encode().hex()
    found = []
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            name = SQL("{}.{}").format(Identifier(schema), Identifier(table))
            row = conn.execute(
                SQL("SELECT count(*) FROM {} t WHERE t::text LIKE %s OR t::text LIKE %s").format(name),
                (f"%{needle}%", f"%{hexed}%"),
            ).fetchone()
            if row is not None and row[0]:
                found.append(f"{schema}.{table}")
    assert tables, "no tables found to search"
    return found


def test_the_ledger_holds_no_plaintext_of_sealed_fields(core: Core, settings: Settings) -> None:
    secret_word = marker()
    content = f"The vault combination word is {secret_word} for the east wing"
    value = f"word {secret_word}"
    result = core.memory.write(
        AGENT, WriteMemory(content=content, subject="east wing vault", attribute="word", value=value)
    )
    assert result.outcome == "stored"
    assert result.id is not None

    states = all_states(core)
    assert states, "nothing was written"
    for position, topic, state in states:
        assert secret_word.encode() not in state, (position, topic)
        assert secret_word not in state.decode("utf-8", errors="replace"), (position, topic)
    assert tables_holding(core, secret_word) == []

    # the sealed form: fields blanked, ciphertext beside them
    [(_, _, written)] = [(p, t, s) for p, t, s in states if t == "MemoryWritten"]
    form = json.loads(written)
    assert form["e"]["content"] is None
    assert form["e"]["value"] is None
    assert form["e"]["memory_id"] == str(result.id)
    assert form["s"]

    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        keys = conn.execute(
            SQL("SELECT kek_id, wrapped FROM {} WHERE memory_id = %s").format(DATA_KEYS), (result.id,)
        ).fetchall()
    assert len(keys) == 1
    assert keys[0][0] == core.ledger.kek.key_id
    assert len(bytes(keys[0][1])) > 32  # wrapped: nonce + key + tag, never the raw key

    # round trip through a process that has nothing cached
    with open_core(settings) as fresh:
        state = fresh.memory.memory(result.id)
        assert state is not None
        assert state.content == content
        assert state.value == value
        assert state.subject == "east wing vault"
        [recorded] = [r for r in fresh.ledger.read(0, 100) if r.originator_id == result.id]
        assert getattr(recorded.event, "content", None) == content


def test_a_destroyed_data_key_leaves_a_tombstone_and_a_verified_chain(core: Core, settings: Settings) -> None:
    shredded_word, kept_word = marker(), marker()
    shredded = core.memory.write(
        AGENT,
        WriteMemory(
            content=f"Dana's home address is {shredded_word} street",
            subject="dana",
            attribute="address",
            value=f"{shredded_word} street",
        ),
    )
    kept = core.memory.write(AGENT, WriteMemory(content=f"The team mascot is called {kept_word}"))
    assert shredded.id is not None
    assert kept.id is not None
    before = core.ledger.verify()
    assert before.ok

    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        deleted = conn.execute(
            SQL("DELETE FROM {} WHERE memory_id = %s").format(DATA_KEYS), (shredded.id,)
        ).rowcount
    assert deleted == 1

    with open_core(settings) as fresh:
        state = fresh.memory.memory(shredded.id)
        assert state is not None
        assert state.content is None
        assert state.value is None
        # subject and attribute name the person: sealed too, so shredded with the key
        assert (state.subject, state.attribute, state.namespace) == (None, None, "acme/eng")
        other = fresh.memory.memory(kept.id)
        assert other is not None
        assert other.content == f"The team mascot is called {kept_word}"
        # the whole notification log still decodes; the shredded event is a tombstone
        log = fresh.ledger.read(0, 1000)
        assert len(log) == before.checked
        tomb = next(r for r in log if r.originator_id == shredded.id)
        assert getattr(tomb.event, "content", "missing") is None
        report = fresh.ledger.verify()
        assert report.ok, report
        assert report.checked == before.checked
        assert report.head_hash == before.head_hash


# -- bad input ---------------------------------------------------------------------------------


def topics(core: Core) -> list[str]:
    return [t for _, t, _ in all_states(core)]


def assert_only_a_denial_was_recorded(core: Core, before: int, identity: Identity) -> AuditRecorded:
    after = core.ledger.read(before, 100)
    assert [type(r.event).__name__ for r in after] == ["AuditRecorded"], [r.event for r in after]
    audit = after[0].event
    assert isinstance(audit, AuditRecorded)
    assert audit.op == "write"
    assert audit.outcome == "denied"
    assert audit.actor == identity.actor
    assert audit.namespace == identity.namespace
    assert core.ledger.verify().ok
    return audit


REJECTED: dict[str, tuple[Callable[[], WriteMemory], str]] = {
    "empty": (lambda: WriteMemory(content=""), "empty"),
    "blank": (lambda: WriteMemory(content=" \n\t  "), "empty"),
    "oversized": (lambda: WriteMemory(content="deploy notes " + "x" * 16_384), "too_large"),
    "oversized_in_bytes": (lambda: WriteMemory(content="é" * 8_193), "too_large"),
    "low_information": (lambda: WriteMemory(content="ok thanks!"), "low_information"),
    "secret": (
        lambda: WriteMemory(content="The CI deploy key is AKIAIOSFODNN7EXAMPLE for the bucket"),
        "secret_forbidden",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_content_leaves_only_a_denied_audit_record(core: Core, case: str) -> None:
    make, reason = REJECTED[case]
    core.memory.write(AGENT, WriteMemory(content="Earlier fact: the office opens at eight"))
    before = core.ledger.head_position()
    result = core.memory.write(AGENT, make())
    assert result.outcome == "rejected"
    assert result.id is None
    assert [r.reason for r in result.rejected] == [reason]
    assert result.rejected[0].detail
    audit = assert_only_a_denial_was_recorded(core, before, AGENT)
    assert reason in audit.detail
    assert result.position == before + 1
    if case == "secret":
        assert "AKIAIOSFODNN7EXAMPLE" not in b"".join(s for _, _, s in all_states(core)).decode()


REFUSED: dict[str, tuple[Identity, Callable[[], WriteMemory], type[DomainError], str]] = {
    "unknown_source": (
        AGENT,
        lambda: WriteMemory(
            content="The rumour is that lunch moves to noon", provenance=ProvenanceClaim(source="rumour")
        ),
        InvalidRequest,
        "unknown provenance source",
    ),
    "manual_by_agent": (
        AGENT,
        lambda: WriteMemory(
            content="The office opens at eight thirty", provenance=ProvenanceClaim(source="manual")
        ),
        ProvenanceNotAllowed,
        "manual",
    ),
    "auditor_writes": (
        AUDITOR,
        lambda: WriteMemory(content="Auditors should not be writing facts"),
        Forbidden,
        "auditor",
    ),
    "subject_without_attribute": (
        AGENT,
        lambda: WriteMemory(content="Dana likes tea in the morning", subject="dana"),
        InvalidRequest,
        "subject and attribute",
    ),
    "value_without_slot": (
        AGENT,
        lambda: WriteMemory(content="Dana likes tea in the morning", value="tea"),
        InvalidRequest,
        "value needs a slot",
    ),
    "overlong_ref": (
        MEMBER,
        lambda: WriteMemory(
            content="See the runbook for the failover steps",
            provenance=ProvenanceClaim(source="document", ref="r" * 600),
        ),
        InvalidRequest,
        "provenance.ref",
    ),
    "empty_tag": (
        AGENT,
        lambda: WriteMemory(content="The failover drill is every quarter", tags=("",)),
        InvalidRequest,
        "tags",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_commands_raise_a_domain_error_and_leave_only_an_audit(core: Core, case: str) -> None:
    identity, make, error, words = REFUSED[case]
    before = core.ledger.head_position()
    with pytest.raises(error) as raised:
        core.memory.write(identity, make())
    assert words in raised.value.detail
    audit = assert_only_a_denial_was_recorded(core, before, identity)
    assert raised.value.code in audit.detail
    assert "MemoryWritten" not in topics(core)


# Commands whose fields have the wrong Python types. A msgspec Struct does not check types
# when constructed, so the service is the last line: it must refuse them with a domain
# error (audited, like every other refusal), never crash unaudited, and never store them.
WRONG_TYPES: dict[str, dict[str, Any]] = {
    "content_int": {"content": 123},
    "content_none": {"content": None},
    "subject_int": {"content": "Dana works in the Berlin office", "subject": 5, "attribute": "city"},
    "tags_str": {"content": "Team standup is at 9:30 every day", "tags": "urgent"},
    "event_time_str": {"content": "The release went out on the first", "event_time": "yesterday"},
    "type_unknown": {"content": "Dana likes green tea in the morning", "type": "rumour"},
}
WRONG_TYPES_ACCEPTED: dict[str, dict[str, Any]] = {
    "provenance_dict": {"content": "Team lunch is on Fridays at noon", "provenance": {"source": "document"}},
}


@pytest.mark.parametrize("case", sorted(WRONG_TYPES))
def test_wrongly_typed_commands_are_refused_and_audited(core: Core, case: str) -> None:
    before = core.ledger.head_position()
    command = WriteMemory(**WRONG_TYPES[case])
    outcome: WriteResult | BaseException
    try:
        outcome = core.memory.write(AGENT, command)
    except BaseException as error:  # classified below
        outcome = error
    appended = [t for p, t, _ in all_states(core) if p > before]
    assert "MemoryWritten" not in appended, (
        f"a wrongly typed command was stored as a memory ({case}): {outcome!r}"
    )
    if isinstance(outcome, WriteResult):
        assert outcome.outcome == "rejected", outcome
    else:
        assert isinstance(outcome, DomainError), f"{case}: not a domain error: {outcome!r}"
    assert_only_a_denial_was_recorded(core, before, AGENT)


@pytest.mark.parametrize("field", ["valid_from", "event_time"])
def test_a_time_without_a_timezone_is_refused_and_cannot_break_its_slot(core: Core, field: str) -> None:
    """A naive time cannot be ordered against the ledger's times: refused at the wire
    boundary (the command type demands a zone) and by the service when built in Python,
    so the slot keeps working for the next writer."""
    body = {
        "content": "Dana sits in room 1",
        "subject": "dana",
        "attribute": "desk",
        "value": "room 1",
        field: "2024-01-01T00:00:00",
    }
    with pytest.raises(msgspec.ValidationError, match="timezone"):
        msgspec.json.decode(json.dumps(body), type=WriteMemory)
    before = core.ledger.head_position()
    naive = {**body, field: datetime(2024, 1, 1)}  # a naive time: the point of the test
    with pytest.raises(DomainError, match="timezone"):
        core.memory.write(AGENT, WriteMemory(**naive))  # type: ignore[arg-type]
    assert_only_a_denial_was_recorded(core, before, AGENT)
    first = core.memory.write(
        AGENT, WriteMemory(content="Dana sits in room 1", subject="dana", attribute="desk", value="room 1")
    )
    second = core.memory.write(
        AGENT,
        WriteMemory(content="Dana sits in room 2", subject="dana", attribute="desk", value="room 2"),
    )
    assert second.outcome == "superseded"
    assert second.supersedes == (first.id,)


def test_a_provenance_given_as_its_wire_form_is_read_as_that_form(core: Core) -> None:
    """A dict for provenance is exactly what the wire carries: it is validated into a
    ProvenanceClaim (not stored raw), so the event decodes again."""
    result = core.memory.write(AGENT, WriteMemory(**WRONG_TYPES_ACCEPTED["provenance_dict"]))
    assert result.outcome == "stored"
    assert result.id is not None
    state = core.memory.memory(result.id)
    assert state is not None
    assert [p.source for p in state.provenance] == ["document"]


def test_wrong_types_are_refused_at_the_decoding_boundary() -> None:
    """What the API and clients decode with: msgspec validates types there."""
    for fields in WRONG_TYPES.values():
        with pytest.raises(msgspec.ValidationError):
            msgspec.json.decode(json.dumps(fields), type=WriteMemory)
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(b'{"content": "x", "namespace": "acme"}', type=WriteMemory)


def test_a_wrongly_typed_write_does_not_poison_the_notification_log(core: Core, settings: Settings) -> None:
    """Whatever the service accepts must decode again: otherwise every replay, projection
    and stream load over that position fails for good (the ledger cannot be rewritten)."""
    good = core.memory.write(AGENT, WriteMemory(content="The office opens at eight"))
    before = core.ledger.head_position()
    with pytest.raises(InvalidRequest, match=r"tags"):
        core.memory.write(AGENT, WriteMemory(content="Team standup is at 9:30 every day", tags="urgent"))  # type: ignore[arg-type]
    assert_only_a_denial_was_recorded(core, before, AGENT)
    with open_core(settings) as fresh:
        log = fresh.ledger.read(0, 1000)  # raises if an undecodable event was stored
        assert len(log) == fresh.ledger.head_position()
        assert good.id is not None
        assert fresh.memory.memory(good.id) is not None


def test_the_configured_content_limit_is_enforced(settings: Settings) -> None:
    """MEMWARDEN_MAX_CONTENT_BYTES (Settings.max_content_bytes) bounds what a write stores."""
    limited = msgspec.structs.replace(settings, max_content_bytes=200)
    with open_core(limited) as core:
        before = core.ledger.head_position()
        result = core.memory.write(AGENT, WriteMemory(content="Release checklist: " + "step " * 60))
        assert result.outcome == "rejected", f"{result.outcome}: a 320-byte write passed a 200-byte limit"
        assert [r.reason for r in result.rejected] == ["too_large"]
        assert_only_a_denial_was_recorded(core, before, AGENT)


def test_every_memory_gets_exactly_one_data_key(core: Core) -> None:
    ids: list[UUID] = []
    for n in range(5):
        result = core.memory.write(
            AGENT, WriteMemory(content=f"Fact number {n}: build agents run image v{n}")
        )
        assert result.id is not None
        ids.append(result.id)
    dedup = core.memory.write(AGENT, WriteMemory(content="fact number 0: build agents run image v0"))
    assert dedup.outcome == "deduplicated"
    core.memory.write(AGENT, WriteMemory(content=""))
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        rows = conn.execute(SQL("SELECT memory_id FROM {}").format(DATA_KEYS)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(ids)
