"""The projections' sanitizing layer (projections/sanitize.py): pure, deterministic, and a
no-op (the same objects) on everything already storable."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import uuid4

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.events import (
    AuditRecorded,
    Event,
    KnowledgeChunk,
    KnowledgePublished,
    MemoryWritten,
    Provenance,
)
from memwarden.projections.sanitize import (
    EARLIEST,
    LATEST,
    REPLACEMENT,
    sanitized,
    storable_text,
    storable_time,
)

AT = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
UNSTORABLE = {"\x00"} | {chr(c) for c in range(0xD800, 0xE000)}


def memory(**fields: Any) -> MemoryWritten:
    values: dict[str, Any] = {
        "at": AT,
        "memory_id": uuid4(),
        "namespace": "acme/eng",
        "actor": "agent-1",
        "type": "fact",
        "scope": "team",
        "content": "Dana lives in Lyon",
        "subject": "dana",
        "attribute": "city",
        "value": "Lyon",
        "tags": ("hometown",),
        "selectors": ("channel:slack",),
        "provenance": (Provenance("conversation", "agent-1", "doc-1"),),
        "valid_from": AT,
        "status": "active",
        "trust_tier": "canonical",
        "classification": Classification(),
        "embedding": b"\x00\x01",
        **fields,
    }
    return MemoryWritten(**values)


def recorded(event: Event, position: int = 1) -> Recorded:
    return Recorded(uuid4(), 1, event, position)


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=[])))
def test_text_comes_out_storable_with_each_bad_character_replaced(text: str) -> None:
    out = storable_text(text)
    out.encode("utf-8")  # no lone surrogate left
    assert "\x00" not in out
    assert len(out) == len(text)
    assert [b if a in UNSTORABLE else a for a, b in zip(text, out, strict=True)] == list(out)
    assert all(b == REPLACEMENT for a, b in zip(text, out, strict=True) if a in UNSTORABLE)
    assert storable_text(out) is out  # idempotent, and storable text is passed on as it is


def test_storable_text_is_the_same_object() -> None:
    for text in ("", "plain", "café ☕ \U0001d518", "ends with a pair 😀"):
        assert storable_text(text) is text
    assert storable_text("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd"


@given(st.datetimes(timezones=st.timezones()) | st.datetimes())
def test_times_come_out_within_years_1_to_9999_in_utc(moment: datetime) -> None:
    out = storable_time(moment)
    assert out.utcoffset() is not None
    assert EARLIEST <= out <= LATEST
    out.astimezone(UTC)  # what a read of the row does: never overflows
    if moment.utcoffset() is not None and EARLIEST <= moment <= LATEST:
        assert out is moment


def test_times_past_either_end_are_clamped_to_it() -> None:
    year_0 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    year_10000 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-1)))
    assert storable_time(year_0) == EARLIEST == datetime(1, 1, 1, tzinfo=UTC)
    assert storable_time(year_10000) == LATEST == datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    assert storable_time(datetime(2026, 3, 1, 9, 30)) == AT  # no zone: read as UTC


def test_a_batch_of_storable_events_is_passed_on_as_it_is() -> None:
    events = [recorded(memory()), recorded(memory(content=None, tags=(), provenance=()))]
    assert sanitized(events) is events


def test_every_text_and_time_of_an_event_is_repaired_and_nothing_else() -> None:
    year_0 = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    poisoned = memory(
        content="Dana\x00",
        subject="da\ud800na",
        tags=("ok", "b\x00d"),
        provenance=(Provenance("conversation", "agent-1", "doc\x00"),),
        event_time=year_0,
        valid_from=year_0,
    )
    clean = recorded(
        AuditRecorded(
            at=AT, record_id=uuid4(), actor="a", namespace="acme", role="agent", op="read", outcome="ok"
        )
    )
    events = [clean, recorded(poisoned, 2)]
    out = sanitized(events)
    assert out[0] is clean
    repaired = out[1].event
    assert isinstance(repaired, MemoryWritten)
    assert (repaired.content, repaired.subject, repaired.tags) == (
        "Dana\ufffd",
        "da\ufffdna",
        ("ok", "b\ufffdd"),
    )
    assert repaired.provenance == (Provenance("conversation", "agent-1", "doc\ufffd"),)
    assert repaired.event_time == repaired.valid_from == EARLIEST
    assert repaired.tags[0] is poisoned.tags[0]
    assert repaired.embedding is poisoned.embedding  # bytes are not text
    assert (out[1].originator_id, out[1].position) == (events[1].originator_id, 2)
    assert sanitized(events) == out  # deterministic
    msgspec.json.encode(repaired)  # storable as JSON (a lone surrogate could not be)


def test_nested_text_of_any_event_type_is_reached() -> None:
    chunk = KnowledgeChunk(chunk_id=uuid4(), heading="On\x00call", text="Page \ud800 the lead")
    published = KnowledgePublished(
        at=AT,
        document_id=uuid4(),
        namespace="acme",
        slug="oncall",
        version=1,
        title="On-call",
        body="b",
        content_hash="h",
        source="manual",
        published_by="olga",
        chunks=(chunk,),
    )
    (out,) = sanitized([recorded(published)])
    assert isinstance(out.event, KnowledgePublished)
    assert out.event.chunks[0].heading == "On\ufffdcall"
    assert out.event.chunks[0].text == "Page \ufffd the lead"


class LaterEvent(Event, frozen=True, kw_only=True):
    """A shape no event has today (a dict, a list, a set), as a later version might add."""

    notes: dict[str, str]
    words: list[str]
    labels: frozenset[str]


def test_text_in_any_container_of_an_event_is_reached() -> None:
    clean = LaterEvent(at=AT, notes={"k": "v"}, words=["a"], labels=frozenset({"x"}))
    assert sanitized([recorded(clean)])[0].event is clean
    poisoned = LaterEvent(
        at=AT, notes={"k\x00": "v", "ok": "\x00"}, words=["a", "\ud800"], labels=frozenset({"\x00"})
    )
    (out,) = sanitized([recorded(poisoned)])
    assert isinstance(out.event, LaterEvent)
    assert out.event.notes == {"k\ufffd": "v", "ok": "\ufffd"}
    assert out.event.words == ["a", "\ufffd"]
    assert out.event.labels == frozenset({"\ufffd"})


def test_only_the_kinds_a_projection_reads_are_looked_at() -> None:
    poisoned = recorded(memory(content="Dana\x00"))
    audit = recorded(
        AuditRecorded(
            at=AT,
            record_id=uuid4(),
            actor="a",
            namespace="acme",
            role="agent",
            op="x",
            outcome="ok",
            detail="\x00",
        )
    )
    events = [poisoned, audit]
    assert sanitized(events, (AuditRecorded,))[0] is poisoned  # passed unread
    assert sanitized(events, (AuditRecorded,))[1].event == msgspec.structs.replace(
        audit.event, detail="\ufffd"
    )
    unread = [poisoned]
    assert sanitized(unread, (KnowledgePublished,)) is unread
    (repaired,) = sanitized([poisoned], (MemoryWritten,))
    assert isinstance(repaired.event, MemoryWritten)
    assert repaired.event.content == "Dana\ufffd"
