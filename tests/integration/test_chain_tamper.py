"""The hash chain against a tampering database user, and signed checkpoints.

Every tampering example runs in ONE uncommitted transaction: the change is made, the
chain is recomputed through that transaction's cursor (so it sees the change), the
first bad position is checked, and the transaction is rolled back. The ledger is built
once per test and shared by all examples.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import msgspec
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from eventsourcing.persistence import DataError, StoredEvent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.chain import GENESIS, canonical, link
from memwarden.domain.ledger.checkpoints import Checkpoint, InvalidCheckpoint
from memwarden.domain.ledger.keys import SigningKey
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.events import EVENT_TYPES
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import SCHEMA
from memwarden.domain.settings import Settings as MwSettings

AGENT = Identity("acme/eng", "agent-1", "agent")
OTHER = Identity("acme/eng", "agent-2", "agent")
HUMAN = Identity("acme/eng", "dana", "member")
ADMIN = Identity("acme/eng", "olga", "admin")

EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
STORABLE = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
"""What PostgreSQL text can hold: no NUL, no lone surrogate (see the surrogate test below)."""
UNSTORABLE = (UnicodeEncodeError, psycopg.DataError, DataError)
CHAIN = SQL("{}.ledger_chain").format(Identifier(SCHEMA))


@dataclass(frozen=True)
class Row:
    position: int
    originator_id: UUID
    version: int
    topic: str
    state: bytes


def populate(core: Core) -> None:
    """A small ledger with most kinds of event: writes, dedupe, supersedence, a dispute
    settled by a reviewer, a verification and a rejected (audit-only) write."""
    m = core.memory
    assert m.write(AGENT, WriteMemory(content="The deploy window is Tuesday 10:00 UTC")).outcome == "stored"
    dup = m.write(OTHER, WriteMemory(content="the deploy window is  tuesday 10:00 UTC."))
    assert dup.outcome == "deduplicated"
    first = m.write(
        AGENT,
        WriteMemory(content="Dana's desk is in room 101", subject="dana", attribute="desk", value="room 101"),
    )
    assert first.outcome == "stored"
    second = m.write(
        AGENT,
        WriteMemory(content="Dana's desk is in room 204", subject="dana", attribute="desk", value="room 204"),
    )
    assert second.outcome == "superseded"
    assert second.supersedes == (first.id,)
    rota = m.write(
        HUMAN,
        WriteMemory(
            content="The on-call rota is kept in the ops wiki",
            subject="oncall",
            attribute="rota",
            value="ops wiki",
            provenance=ProvenanceClaim(source="manual"),
        ),
    )
    assert rota.outcome == "stored"
    disputed = m.write(
        AGENT,
        WriteMemory(
            content="The on-call rota lives in a spreadsheet",
            subject="oncall",
            attribute="rota",
            value="spreadsheet",
        ),
    )
    assert disputed.outcome == "disputed"
    assert disputed.dispute_id is not None
    m.resolve_dispute(
        ADMIN,
        ResolveDispute(dispute_id=disputed.dispute_id, decision="keep_old", reason="the wiki is canonical"),
    )
    assert second.id is not None
    m.verify(OTHER, VerifyMemory(memory_id=second.id, supports=True, note="walked past it"))
    assert m.write(AGENT, WriteMemory(content="   ")).outcome == "rejected"


def load_rows(conn: psycopg.Connection[Any]) -> list[Row]:
    rows = conn.execute(
        SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state"
            " FROM {} ORDER BY notification_id"
        ).format(EVENTS)
    ).fetchall()
    return [Row(r[0], r[1], r[2], r[3], bytes(r[4])) for r in rows]


@pytest.fixture
def built(core: Core) -> tuple[Core, list[Row]]:
    populate(core)
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        return core, load_rows(conn)


def test_the_built_ledger_is_gapless_varied_and_verifies(built: tuple[Core, list[Row]]) -> None:
    core, rows = built
    assert [r.position for r in rows] == list(range(1, len(rows) + 1))
    topics = {r.topic for r in rows}
    assert {
        "MemoryWritten",
        "MemoryReaffirmed",
        "MemorySuperseded",
        "ClaimSet",
        "DisputeOpened",
        "DisputeResolved",
        "MemoryRetired",
        "MemoryVerified",
        "AuditRecorded",
    } <= topics
    report = core.ledger.verify()
    assert report.ok, report
    assert report.checked == len(rows)
    assert report.head_position == len(rows)
    position, head_hash = core.ledger.recorder.head()
    assert (position, head_hash.hex()) == (len(rows), report.head_hash)


def test_an_untouched_ledger_verifies_inside_a_transaction(built: tuple[Core, list[Row]]) -> None:
    core, rows = built
    with psycopg.connect(core.params.conninfo()) as conn, conn.cursor() as cur:
        report = core.ledger.recorder.verify_chain(cursor=cur)
        conn.rollback()
    assert report.ok, report
    assert report.checked == len(rows)
    assert report.first_bad_position is None


def test_the_chain_is_the_documented_formula(built: tuple[Core, list[Row]]) -> None:
    """h_n = sha256(h_{n-1} || canonical(record_n)), recomputed independently here."""
    core, rows = built
    with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
        hashes = dict(conn.execute(SQL("SELECT position, hash FROM {}").format(CHAIN)).fetchall())
    previous = GENESIS
    for row in rows:
        previous = link(
            previous, canonical(row.position, row.originator_id, row.version, row.topic, row.state)
        )
        assert bytes(hashes[row.position]) == previous, row.position
    assert len(hashes) == len(rows)


# -- tampering ---------------------------------------------------------------------------


Tamper = Callable[[psycopg.Cursor[Any], list[Row], int, st.DataObject], tuple[int, str]]
"""One kind of change: (cursor, rows, drawn row index, data) -> (first bad position, problem)."""


def _update_event(cur: psycopg.Cursor[Any], column: str, value: object, position: int) -> None:
    cur.execute(
        SQL("UPDATE {} SET {} = %s WHERE notification_id = %s").format(EVENTS, Identifier(column)),
        (value, position),
    )


def flip_state_byte(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    row = rows[index]
    at = data.draw(st.integers(0, len(row.state) - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="mask")
    state = bytearray(row.state)
    state[at] ^= mask
    _update_event(cur, "state", bytes(state), row.position)
    return row.position, "hash mismatch"


def change_topic(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    row = rows[index]
    topic = data.draw(
        st.sampled_from(sorted(set(EVENT_TYPES) - {row.topic})) | st.text(STORABLE, max_size=12),
        label="topic",
    )
    if topic == row.topic:
        topic += "X"
    _update_event(cur, "topic", topic, row.position)
    return row.position, "hash mismatch"


def change_version(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    row = rows[index]
    taken = {r.version for r in rows if r.originator_id == row.originator_id}
    version = data.draw(st.integers(-(2**40), 2**40).filter(lambda v: v not in taken), label="version")
    _update_event(cur, "originator_version", version, row.position)
    return row.position, "hash mismatch"


def change_originator(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    """Another existing stream (where that version is free), or a new one."""
    row = rows[index]
    others = sorted(
        {r.originator_id for r in rows} - {r.originator_id for r in rows if r.version == row.version}
    )
    choices = st.uuids() | (st.sampled_from(others) if others else st.nothing())
    new_id = data.draw(choices.filter(lambda u: u != row.originator_id), label="originator")
    _update_event(cur, "originator_id", new_id, row.position)
    return row.position, "hash mismatch"


def delete_event(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, _data: st.DataObject
) -> tuple[int, str]:
    cur.execute(SQL("DELETE FROM {} WHERE notification_id = %s").format(EVENTS), (rows[index].position,))
    return rows[index].position, "event row missing"


def _insert_event(cur: psycopg.Cursor[Any], rows: list[Row], data: st.DataObject) -> int:
    head = len(rows)
    state = data.draw(st.binary(max_size=64), label="state")
    cur.execute(
        SQL(
            "INSERT INTO {} (notification_id, originator_id, originator_version, topic, state)"
            " VALUES (%s, %s, 1, %s, %s)"
        ).format(EVENTS),
        (head + 1, uuid4(), data.draw(st.sampled_from(sorted(EVENT_TYPES)), label="topic"), state),
    )
    return head + 1


def insert_event(
    cur: psycopg.Cursor[Any], rows: list[Row], _index: int, data: st.DataObject
) -> tuple[int, str]:
    return _insert_event(cur, rows, data), "chain link missing"


def insert_event_and_link(
    cur: psycopg.Cursor[Any], rows: list[Row], _index: int, data: st.DataObject
) -> tuple[int, str]:
    position = _insert_event(cur, rows, data)
    forged = data.draw(st.binary(min_size=32, max_size=32), label="forged hash")
    cur.execute(SQL("INSERT INTO {} (position, hash) VALUES (%s, %s)").format(CHAIN), (position, forged))
    return position, "hash mismatch"


def insert_link(
    cur: psycopg.Cursor[Any], rows: list[Row], _index: int, _data: st.DataObject
) -> tuple[int, str]:
    cur.execute(
        SQL("INSERT INTO {} (position, hash) VALUES (%s, %s)").format(CHAIN), (len(rows) + 1, bytes(32))
    )
    return len(rows) + 1, "event row missing"


def swap_positions(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    drawn = data.draw(st.integers(0, len(rows) - 2), label="other index")
    other = drawn if drawn < index else drawn + 1
    p, q = rows[index].position, rows[other].position
    for old, new in ((p, -1), (q, p), (-1, q)):
        _update_event(cur, "notification_id", new, old)
    return min(p, q), "hash mismatch"


def change_hash(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, data: st.DataObject
) -> tuple[int, str]:
    at = data.draw(st.integers(0, 31), label="hash byte")
    mask = data.draw(st.integers(1, 255), label="hash mask")
    cur.execute(
        SQL(
            "UPDATE {} SET hash = set_byte(hash, %s::int, get_byte(hash, %s::int) # %s::int) WHERE position = %s"
        ).format(CHAIN),
        (at, at, mask, rows[index].position),
    )
    return rows[index].position, "hash mismatch"


def delete_link(
    cur: psycopg.Cursor[Any], rows: list[Row], index: int, _data: st.DataObject
) -> tuple[int, str]:
    cur.execute(SQL("DELETE FROM {} WHERE position = %s").format(CHAIN), (rows[index].position,))
    return rows[index].position, "chain link missing"


TAMPERS: dict[str, Tamper] = {
    "flip_state_byte": flip_state_byte,
    "change_topic": change_topic,
    "change_version": change_version,
    "change_originator": change_originator,
    "delete_event": delete_event,
    "insert_event": insert_event,
    "insert_event_and_link": insert_event_and_link,
    "insert_link": insert_link,
    "swap_positions": swap_positions,
    "change_hash": change_hash,
    "delete_link": delete_link,
}

KINDS = tuple(TAMPERS)


def tamper(cur: psycopg.Cursor[Any], rows: list[Row], kind: str, data: st.DataObject) -> tuple[int, str]:
    """Make one change in the open transaction; return (expected first bad position, problem)."""
    index = data.draw(st.integers(0, len(rows) - 1), label="row index")
    return TAMPERS[kind](cur, rows, index, data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(KINDS), data=st.data())
@pytest.mark.slow
def test_any_single_change_is_found_at_its_position(
    built: tuple[Core, list[Row]], kind: str, data: st.DataObject
) -> None:
    core, rows = built
    with psycopg.connect(core.params.conninfo()) as conn:
        try:
            with conn.cursor() as cur:
                expected, problem = tamper(cur, rows, kind, data)
                report = core.ledger.recorder.verify_chain(cursor=cur)
        finally:
            conn.rollback()
    assert not report.ok, (kind, expected)
    assert report.first_bad_position == expected, (kind, report)
    assert report.problem is not None
    assert report.problem.startswith(problem), (kind, report)
    assert report.checked == expected - 1
    assert report.head_position == expected - 1


@pytest.mark.parametrize("topic", ["\ud800", "memory_written\udfff", "\x00"])
def test_a_topic_postgresql_cannot_hold_is_refused_by_the_write_path(
    built: tuple[Core, list[Row]], topic: str
) -> None:
    """Why the tampering test draws only storable topics: such a topic never reaches the
    ledger, through its own append or a tampering client alike, and the chain still holds."""
    core, rows = built
    stored = StoredEvent(originator_id=uuid4(), originator_version=1, topic=topic, state=b"{}")
    with pytest.raises(UNSTORABLE):
        core.ledger.recorder.insert_events([stored])
    with psycopg.connect(core.params.conninfo()) as conn, conn.cursor() as cur:
        with pytest.raises(UNSTORABLE):
            cur.execute(SQL("UPDATE {} SET topic = %s WHERE notification_id = 1").format(EVENTS), (topic,))
        conn.rollback()
    report = core.ledger.recorder.verify_chain()
    assert report.ok
    assert report.head_position == len(rows)


def test_tampering_was_rolled_back(built: tuple[Core, list[Row]]) -> None:
    """Run a few tampering transactions by hand, then prove nothing stuck."""
    core, rows = built
    with psycopg.connect(core.params.conninfo()) as conn:
        for statement in (
            SQL("DELETE FROM {} WHERE notification_id = 2").format(EVENTS),
            SQL("UPDATE {} SET hash = '\\x00'::bytea WHERE position = 3").format(CHAIN),
        ):
            with conn.cursor() as cur:
                cur.execute(statement)
                assert not core.ledger.recorder.verify_chain(cursor=cur).ok
            conn.rollback()
        with psycopg.connect(core.params.conninfo(), autocommit=True) as check:
            assert load_rows(check) == rows
    report = core.ledger.verify()
    assert report.ok, report
    assert report.checked == len(rows)


def test_verify_stop_at_ignores_damage_after_it(built: tuple[Core, list[Row]]) -> None:
    core, rows = built
    last = len(rows)
    with psycopg.connect(core.params.conninfo()) as conn, conn.cursor() as cur:
        cur.execute(SQL("DELETE FROM {} WHERE position = %s").format(CHAIN), (last,))
        before = core.ledger.recorder.verify_chain(stop_at=last - 1, cursor=cur)
        whole = core.ledger.recorder.verify_chain(cursor=cur)
        conn.rollback()
    assert before.ok, before
    assert before.checked == last - 1
    assert not whole.ok
    assert whole.first_bad_position == last


# -- checkpoints ---------------------------------------------------------------------------


def test_a_fresh_checkpoint_verifies_and_survives_later_appends(built: tuple[Core, list[Row]]) -> None:
    core, rows = built
    checkpoint = core.ledger.checkpoint()
    assert checkpoint.position == len(rows)
    assert core.ledger.verify(checkpoint).ok
    # it travels as JSON and still verifies offline
    travelled = msgspec.json.decode(msgspec.json.encode(checkpoint), type=Checkpoint)
    assert core.ledger.verify(travelled).ok
    later = core.memory.write(AGENT, WriteMemory(content="The staging cluster runs in eu-west-1"))
    report = core.ledger.verify(checkpoint)
    assert report.ok, report
    assert report.checked == later.position


def test_a_truncated_ledger_fails_against_an_earlier_checkpoint(built: tuple[Core, list[Row]]) -> None:
    core, rows = built
    checkpoint = core.ledger.checkpoint()
    last = len(rows)
    with psycopg.connect(core.params.conninfo()) as conn:
        conn.execute(SQL("DELETE FROM {} WHERE notification_id = %s").format(EVENTS), (last,))
        conn.execute(SQL("DELETE FROM {} WHERE position = %s").format(CHAIN), (last,))
        conn.commit()
    # On its own the shortened chain is consistent: only the checkpoint can tell.
    alone = core.ledger.verify()
    assert alone.ok, alone
    assert alone.head_position == last - 1
    report = core.ledger.verify(checkpoint)
    assert not report.ok
    assert report.first_bad_position == last
    assert report.problem is not None


def test_a_rewritten_and_rechained_history_fails_against_the_checkpoint(
    built: tuple[Core, list[Row]],
) -> None:
    """An attacker who can write the chain table too recomputes every link after a change."""
    core, rows = built
    checkpoint = core.ledger.checkpoint()
    target = rows[2]
    forged = bytearray(target.state)
    forged[len(forged) // 2] ^= 0x01
    with psycopg.connect(core.params.conninfo()) as conn:
        conn.execute(
            SQL("UPDATE {} SET state = %s WHERE notification_id = %s").format(EVENTS),
            (bytes(forged), target.position),
        )
        previous = GENESIS
        for row in load_rows(conn):
            previous = link(
                previous, canonical(row.position, row.originator_id, row.version, row.topic, row.state)
            )
            conn.execute(
                SQL("UPDATE {} SET hash = %s WHERE position = %s").format(CHAIN), (previous, row.position)
            )
        conn.commit()
    alone = core.ledger.verify()
    assert alone.ok, alone
    report = core.ledger.verify(checkpoint)
    assert not report.ok
    assert report.first_bad_position == checkpoint.position


@pytest.mark.parametrize(
    "change",
    ["hash", "position", "position_up", "signature", "time", "key_id", "foreign_key"],
)
def test_an_altered_checkpoint_is_refused(built: tuple[Core, list[Row]], change: str) -> None:
    core, _ = built
    checkpoint = core.ledger.checkpoint()
    if change == "hash":
        flipped = bytearray(bytes.fromhex(checkpoint.hash))
        flipped[0] ^= 0x80
        altered = msgspec.structs.replace(checkpoint, hash=flipped.hex())
    elif change == "position":
        altered = msgspec.structs.replace(checkpoint, position=checkpoint.position - 1)
    elif change == "position_up":
        altered = msgspec.structs.replace(checkpoint, position=checkpoint.position + 1)
    elif change == "signature":
        raw = bytearray(base64.b64decode(checkpoint.signature))
        raw[5] ^= 0x01
        altered = msgspec.structs.replace(checkpoint, signature=base64.b64encode(bytes(raw)).decode())
    elif change == "time":
        altered = msgspec.structs.replace(checkpoint, time=checkpoint.time + timedelta(seconds=1))
    elif change == "key_id":
        altered = msgspec.structs.replace(checkpoint, key_id="0000000000000000")
    else:
        # signed by a key the ledger never registered, claiming the ledger's key id
        stranger = SigningKey(Ed25519PrivateKey.generate())
        signature = stranger.sign(checkpoint.message())
        altered = msgspec.structs.replace(checkpoint, signature=base64.b64encode(signature).decode())
    with pytest.raises(InvalidCheckpoint):
        core.ledger.verify(altered)
    assert core.ledger.verify(checkpoint).ok


def test_a_checkpoint_verifies_after_reopening(settings: MwSettings) -> None:
    with open_core(settings) as first:
        populate(first)
        checkpoint = first.ledger.checkpoint()
        key_id = first.ledger.signing_key.key_id
    assert (settings.data_dir / "keys" / "signing.pem").exists()
    with open_core(settings) as reopened:
        assert reopened.ledger.signing_key.key_id == key_id
        report = reopened.ledger.verify(checkpoint)
        assert report.ok, report
        assert report.checked == checkpoint.position
        again = reopened.ledger.checkpoint()
        assert (again.position, again.hash, again.key_id) == (checkpoint.position, checkpoint.hash, key_id)
        assert reopened.ledger.verify(again).ok
