from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import Cursor

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.events import MemoryVerified
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.disputes.projection import DisputesProjection
from memwarden.projections.listing import ListQuery
from memwarden.projections.memory_objects.projection import MemoryObjectsProjection
from memwarden.projections.reads import ReadModels

AGENT = Identity("acme/eng", "agent-1", "agent")
AGENT2 = Identity("acme/eng", "agent-2", "agent")
HR = Identity("acme/eng", "hr", "member")
ADMIN = Identity("acme", "lead", "admin")


@pytest.fixture
def runtime(settings: Settings) -> Iterator[Runtime]:
    with Runtime(settings, follow=True) as rt:
        yield rt


def slot_write(
    content: str, value: str, source: str = "conversation", when: datetime | None = None
) -> WriteMemory:
    return WriteMemory(
        content=content,
        subject="dana",
        attribute="city",
        value=value,
        provenance=ProvenanceClaim(source=source),
        event_time=when,
    )


def test_read_your_writes_sees_the_fact_just_written(runtime: Runtime) -> None:
    for n in range(20):
        result = runtime.memory.write(AGENT, WriteMemory(content=f"Deploys of service {n} need approval"))
        view = runtime.reads.read(AGENT, result.id, after=result.position)  # type: ignore[arg-type]
        assert view is not None
        assert view.content == f"Deploys of service {n} need approval"
        assert view.status == "active"
        assert view.trust_tier == "canonical"
        assert view.provenance[0].source == "conversation"
        assert view.provenance[0].content_hash is not None


def test_memory_objects_keep_both_time_axes(runtime: Runtime) -> None:
    old = runtime.memory.write(
        AGENT, slot_write("Dana lives in Lyon", "Lyon", when=datetime(2026, 1, 1, tzinfo=UTC))
    )
    new = runtime.memory.write(
        HR, slot_write("Dana lives in Oslo", "Oslo", "manual", datetime(2026, 3, 1, tzinfo=UTC))
    )
    assert new.outcome == "superseded"
    old_view = runtime.reads.read(AGENT, old.id, after=new.position)  # type: ignore[arg-type]
    assert old_view is not None
    assert old_view.valid_to == datetime(2026, 3, 1, tzinfo=UTC)
    assert old_view.retired_at is None  # succession: still believed
    assert old_view.superseded_by == [new.id]
    correction = runtime.memory.write(
        HR, slot_write("Dana lives in Bergen", "Bergen", "manual", datetime(2026, 2, 1, tzinfo=UTC))
    )
    assert correction.outcome == "superseded"
    oslo = runtime.reads.read(AGENT, new.id, after=correction.position)  # type: ignore[arg-type]
    assert oslo is not None
    assert oslo.status == "retired"
    assert oslo.retired_at is not None
    steps = runtime.reads.history(AGENT, old.id) or []
    assert [s.id for s in steps] == [old.id, new.id, correction.id]
    assert [s.kind for s in steps] == ["succession", "correction", None]
    assert all(s.reason == "slot" for s in steps[:2])


def test_scope_hides_siblings_descendants_and_lookalikes(runtime: Runtime) -> None:
    written = runtime.memory.write(AGENT, WriteMemory(content="The eng on-call rota is weekly"))
    runtime.reads.wait_for(written.position)
    assert written.id is not None
    assert runtime.reads.read(AGENT, written.id) is not None
    assert (
        runtime.reads.read(Identity("acme/eng/platform", "a", "agent"), written.id) is not None
    )  # ancestor visible
    for outsider in ("acme/engineering", "acme/sales", "acme", "other/eng", "acme/en"):
        assert runtime.reads.read(Identity(outsider, "x", "agent"), written.id) is None


def test_disputed_memory_is_invisible_until_upheld(runtime: Runtime) -> None:
    runtime.memory.write(HR, slot_write("Dana lives in Oslo", "Oslo", "manual"))
    contra = runtime.memory.write(AGENT, slot_write("Dana lives in Rome", "Rome"))
    assert contra.outcome == "disputed"
    assert contra.id is not None
    assert runtime.reads.read(AGENT, contra.id, after=contra.position) is None
    disputes = runtime.reads.disputes(ADMIN).items
    assert [d.id for d in disputes] == [contra.dispute_id]
    assert runtime.reads.disputes(Identity("other", "x", "admin")).items == []
    assert contra.dispute_id is not None
    resolved = runtime.memory.resolve_dispute(
        ADMIN, ResolveDispute(dispute_id=contra.dispute_id, decision="uphold_new")
    )
    view = runtime.reads.read(AGENT, contra.id, after=resolved.position)
    assert view is not None
    assert view.status == "active"
    assert runtime.reads.disputes(ADMIN).items == []
    assert runtime.reads.disputes(ADMIN, ListQuery(status="resolved")).items[0].decision == "uphold_new"


def test_verification_projects_tier_and_verifier(runtime: Runtime) -> None:
    written = runtime.memory.write(AGENT, WriteMemory(content="The staging database is pg-stage-3"))
    assert written.id is not None
    verified = runtime.memory.verify(AGENT2, VerifyMemory(memory_id=written.id, supports=True))
    view = runtime.reads.read(AGENT, written.id, after=verified.position)
    assert view is not None
    assert view.trust_tier == "verified"
    assert [v.actor for v in view.verifications] == ["agent-2"]


def test_rebuilt_projection_equals_the_live_one(runtime: Runtime, settings: Settings) -> None:
    for n in range(5):
        runtime.memory.write(AGENT, slot_write(f"Dana lives in city {n}", f"city {n}"))
    runtime.memory.write(HR, slot_write("Dana lives in Oslo", "Oslo", "manual"))
    last = runtime.memory.write(AGENT, WriteMemory(content="Builds run on arm64 runners"))
    runtime.reads.wait_for(last.position)

    def snapshot() -> list[Any]:
        with runtime.ledger.datastore.get_connection() as conn:
            return conn.execute(
                "SELECT id, namespace, content, status, trust_tier, valid_from, valid_to, retired_at,"
                " superseded_by, provenance FROM memwarden.memory_objects ORDER BY id"
            ).fetchall()

    live = snapshot()
    with runtime.ledger.datastore.get_connection() as conn:
        conn.execute("TRUNCATE memwarden.memory_objects, memwarden.memory_supersedence, memwarden.disputes")
        conn.execute("DELETE FROM memwarden.projection_tracking")
    runtime.reads.runner.forget_reached()  # tracking was reset behind the runner's back
    runtime.reads.wait_for(last.position)
    assert snapshot() == live
    assert len(live) == 7


class _Poisoned(MemoryObjectsProjection):
    """Fails on any verification event: stands for a bug in a projection."""

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        for recorded in events:
            if isinstance(recorded.event, MemoryVerified):
                raise TypeError("cannot process verification")
        super().apply(curs, schema, events)


def test_poison_event_stops_the_projection_at_its_position(settings: Settings) -> None:
    with Runtime(settings, follow=False) as runtime:
        first = runtime.memory.write(AGENT, WriteMemory(content="Incidents are reviewed on Fridays"))
        assert first.id is not None
        verified = runtime.memory.verify(AGENT2, VerifyMemory(memory_id=first.id, supports=True))
        after = runtime.memory.write(AGENT, WriteMemory(content="Postmortems are blameless"))
        reads = ReadModels(
            runtime.ledger, runtime.core.params.conninfo(), [_Poisoned(), DisputesProjection()], 0.5
        )
        with runtime.ledger.datastore.get_connection() as conn:
            conn.execute(
                "TRUNCATE memwarden.memory_objects, memwarden.memory_supersedence, memwarden.disputes"
            )
            conn.execute("DELETE FROM memwarden.projection_tracking")
        reads.runner.catch_up()
        status = {s.name: s for s in reads.runner.status()}
        poison_position = verified.position - 1  # the verification event; the audit record follows it
        assert status["memory_objects"].stopped_at == poison_position
        assert status["memory_objects"].position == poison_position - 1
        assert status["memory_objects"].error is not None
        assert status["disputes"].position == after.position
        with pytest.raises(Exception, match="waiting for"):
            reads.wait_for(after.position)

        # Another process (an API process beside the projector, the CLI) reports the stop
        # too, though it never applied anything itself.
        elsewhere = ReadModels(
            runtime.ledger, runtime.core.params.conninfo(), [_Poisoned(), DisputesProjection()], 0.5
        )
        seen = {s.name: s for s in elsewhere.runner.status()}
        assert seen["memory_objects"].stopped_at == poison_position
        # Its kind only: a database error can quote the row it failed on, and erasure does
        # not reach this table.
        assert seen["memory_objects"].error == "TypeError; the message is in the log"
        assert seen["disputes"].error is None

        # Once the projection has moved past it (after a fix or a rebuild), the stop is history.
        fixed = ReadModels(runtime.ledger, runtime.core.params.conninfo(), [MemoryObjectsProjection()], 0.5)
        fixed.runner.catch_up()
        assert {s.name: s for s in fixed.runner.status()}["memory_objects"].error is None


def test_history_links_review_decisions(runtime: Runtime) -> None:
    """keep_old and edit are steps of the fact's history, with the decision as reason."""
    kept = runtime.memory.write(HR, slot_write("Dana lives in Oslo", "Oslo", "manual"))
    rejected = runtime.memory.write(AGENT, slot_write("Dana lives in Rome", "Rome"))
    assert rejected.dispute_id is not None
    runtime.memory.resolve_dispute(ADMIN, ResolveDispute(dispute_id=rejected.dispute_id, decision="keep_old"))
    edited = runtime.memory.write(AGENT, slot_write("Dana lives in Pisa", "Pisa"))
    assert edited.dispute_id is not None
    done = runtime.memory.resolve_dispute(
        ADMIN, ResolveDispute(dispute_id=edited.dispute_id, decision="edit", content="Dana lives in Bergen")
    )
    replacement = done.dispute.replacement_id
    steps = runtime.reads.history(AGENT, kept.id, after=done.position) or []  # type: ignore[arg-type]
    by_id = {s.id: s for s in steps}
    assert by_id[rejected.id].kind == "rejected"  # type: ignore[index]
    assert by_id[rejected.id].reason == "dispute:keep_old"  # type: ignore[index]
    assert by_id[rejected.id].superseded_by == kept.id  # type: ignore[index]
    assert by_id[edited.id].reason == "dispute:edit"  # type: ignore[index]
    assert by_id[edited.id].superseded_by == replacement  # type: ignore[index]
    assert replacement in by_id
    assert by_id[kept.id].reason == "dispute:edit"  # type: ignore[index]


def test_a_watching_process_learns_the_projected_position_without_projecting(settings: Settings) -> None:
    """An API process with an external projector: it applies nothing, yet knows from the
    projector's announcements when a write is readable (read-your-writes with no query)."""
    with Runtime(settings, follow=False) as watcher:
        watcher.reads.runner.watch()
        time.sleep(0.3)  # the watch's LISTEN is in place
        with Runtime(settings, follow=True) as projector:
            result = watcher.memory.write(AGENT, WriteMemory(content="The watch learns positions"))
            assert result.position is not None
            deadline = time.monotonic() + 10
            while watcher.reads.runner.reached_hint < result.position and time.monotonic() < deadline:
                time.sleep(0.01)
            assert watcher.reads.runner.reached_hint >= result.position
            assert projector.reads.runner.position() >= result.position
            view = watcher.reads.read(AGENT, result.id, after=result.position)
            assert view is not None
            assert view.content == "The watch learns positions"


def test_a_reader_catches_up_itself_when_nothing_projects(settings: Settings) -> None:
    with Runtime(settings, follow=False) as alone:
        alone.reads.runner.watch()
        result = alone.memory.write(AGENT, WriteMemory(content="Nobody else projects this"))
        assert result.id is not None
        assert alone.reads.runner.position() < (result.position or 0)
        view = alone.reads.read(AGENT, result.id, after=result.position)
        assert view is not None
        assert alone.reads.runner.position() >= (result.position or 0)
