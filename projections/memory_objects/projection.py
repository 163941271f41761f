"""The ``memory_objects`` read model: one row per memory with both time axes (docs/architecture.md §3),
plus ``memory_supersedence``: the edges of the correction/succession chains."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec
from psycopg import Cursor
from psycopg.sql import SQL, Composed, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.erasure import erasure_keys
from memwarden.domain.model.events import (
    MemoryErased,
    MemoryEvent,
    MemoryReaffirmed,
    MemoryReleased,
    MemoryRetired,
    MemorySuperseded,
    MemoryVerified,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.trust import rank_of
from memwarden.projections.base import HandlerMap
from memwarden.projections.rows import array_literal, columns
from memwarden.projections.sanitize import sanitized

_json = msgspec.json.Encoder()


def provenance_entry(provenance: Provenance, content: str | None) -> dict[str, Any]:
    content_hash = hashlib.sha256(content.encode()).hexdigest() if content is not None else None
    return {
        "source": provenance.source,
        "actor": provenance.actor,
        "ref": provenance.ref,
        "content_hash": content_hash,
    }


class MemoryObjectsProjection:
    name = "memory_objects"
    tables = ("memory_objects", "memory_supersedence")

    def create(self, curs: Cursor[Any], schema: str) -> None:
        for statement in _schema_sql(schema):
            curs.execute(statement)

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        """Writes and supersedences are gathered into multi-row statements; every other event
        runs on its own. Statements on different memories commute, so a gathered statement
        is sent before any later statement on one of its memories (a memory's own events
        keep their ledger order); the ``memory_supersedence`` rows depend on nothing here
        and go last, in ledger order."""
        events = sanitized(events, (MemoryEvent,))
        s = Identifier(schema)
        batch = _Batch(curs, s)
        for recorded in events:
            event = recorded.event
            if isinstance(event, MemoryWritten):
                batch.write(recorded)
            elif isinstance(event, MemorySuperseded):
                batch.supersede(recorded)
            else:
                handler = _HANDLERS.get(type(event))
                if handler is not None:
                    batch.touch(getattr(event, "memory_id", None))
                    handler(curs, s, recorded)
                if isinstance(event, MemoryRetired) and (edge := _retired_edge(recorded)) is not None:
                    batch.edges.append(edge)
        batch.flush()


def _schema_sql(schema: str) -> list[Composed]:
    """The tables as they are now, for a rebuild's shadow schema; the live ones are made by
    migration 0002_read_models. ``erasure_keys``: the normalized names a memory's subject,
    tags and selectors go by, what a subject erasure looks up (domain/model/erasure.py),
    emptied by the erasure. ``erased_in_quarantine``: erased while still quarantined, the
    tombstone stays as hidden as the memory was."""
    s = Identifier(schema)
    return [
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.memory_objects (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    actor text NOT NULL,
    scope text NOT NULL,
    type text NOT NULL,
    content text,
    subject text,
    attribute text,
    value text,
    tags text[] NOT NULL DEFAULT '{{}}',
    selectors text[] NOT NULL DEFAULT '{{}}',
    provenance jsonb NOT NULL,
    trust_rank int NOT NULL,
    event_time timestamptz,
    recorded_at timestamptz NOT NULL,
    valid_from timestamptz NOT NULL,
    valid_to timestamptz,
    retired_at timestamptz,
    status text NOT NULL,
    trust_tier text NOT NULL,
    supersedes uuid[] NOT NULL DEFAULT '{{}}',
    superseded_by uuid[] NOT NULL DEFAULT '{{}}',
    classification jsonb NOT NULL,
    verifications jsonb NOT NULL DEFAULT '[]',
    dispute_id uuid,
    position bigint NOT NULL,
    erasure_keys text[] NOT NULL DEFAULT '{{}}',
    erased_in_quarantine boolean NOT NULL DEFAULT false
)""").format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS memory_objects_current ON {s}.memory_objects"
            " (namespace, recorded_at) WHERE status = 'active' AND retired_at IS NULL"
        ).format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS memory_objects_subject ON {s}.memory_objects (namespace, subject)"
        ).format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS memory_objects_erasure_keys ON {s}.memory_objects USING gin (erasure_keys)"
        ).format(s=s),
        SQL("CREATE INDEX IF NOT EXISTS memory_objects_actor ON {s}.memory_objects (actor)").format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.memory_supersedence (
    old_id uuid NOT NULL,
    new_id uuid NOT NULL,
    kind text NOT NULL,
    reason text NOT NULL,
    at timestamptz NOT NULL,
    valid_to timestamptz,
    position bigint NOT NULL,
    PRIMARY KEY (old_id, new_id)
)""").format(s=s),
        SQL("CREATE INDEX IF NOT EXISTS memory_supersedence_new ON {s}.memory_supersedence (new_id)").format(
            s=s
        ),
    ]


def _written_values(r: Recorded) -> tuple[Any, ...]:
    e = r.event
    assert isinstance(e, MemoryWritten)
    provenance = [provenance_entry(p, e.content) for p in e.provenance]
    return (
        e.memory_id,
        e.namespace,
        e.actor,
        e.scope,
        e.type,
        e.content,
        e.subject,
        e.attribute,
        e.value,
        array_literal(e.tags),
        array_literal(e.selectors),
        _json.encode(provenance).decode(),
        rank_of(p.source for p in e.provenance),
        e.event_time,
        e.at,
        e.valid_from,
        e.status,
        e.trust_tier,
        array_literal(e.supersedes),
        _json.encode(e.classification).decode(),
        r.position,
        array_literal(sorted(erasure_keys(e.subject, (*e.tags, *e.selectors)))),
    )


class _Batch:
    """Pending multi-row statements of one ``apply``: new rows (``ON CONFLICT DO NOTHING``,
    so the first write of an id wins, as one by one) and supersedence updates (one per
    memory per statement); ``_Batch.touch`` sends what a statement on a memory must follow."""

    def __init__(self, curs: Cursor[Any], s: Identifier) -> None:
        self.curs, self.s = curs, s
        self.written: list[tuple[Any, ...]] = []
        self.written_ids: set[Any] = set()
        self.superseded: list[tuple[Any, ...]] = []
        self.superseded_ids: set[Any] = set()
        self.edges: list[tuple[Any, ...]] = []

    def write(self, r: Recorded) -> None:
        e = r.event
        assert isinstance(e, MemoryWritten)
        if e.memory_id in self.superseded_ids:  # an update of the id came first: keep the order
            self._send_superseded()
        self.written.append(_written_values(r))
        self.written_ids.add(e.memory_id)

    def supersede(self, r: Recorded) -> None:
        e = r.event
        assert isinstance(e, MemorySuperseded)
        if e.memory_id in self.written_ids:
            self._send_written()
        if e.memory_id in self.superseded_ids:  # one UPDATE changes a row once
            self._send_superseded()
        self.superseded.append((e.memory_id, e.kind == "succession", e.valid_to, e.at, e.by, r.position))
        self.superseded_ids.add(e.memory_id)
        self.edges.append((e.memory_id, e.by, e.kind, e.reason, e.at, e.valid_to, r.position))

    def touch(self, memory_id: Any) -> None:
        """A statement on ``memory_id`` runs next: send what it must follow (all, if unknown)."""
        if memory_id is None or memory_id in self.written_ids:
            self._send_written()
        if memory_id is None or memory_id in self.superseded_ids:
            self._send_superseded()

    def flush(self) -> None:
        self._send_written()
        self._send_superseded()
        if self.edges:
            _insert_edges(self.curs, self.s, self.edges)
            self.edges = []

    def _send_written(self) -> None:
        rows, self.written, self.written_ids = self.written, [], set()
        if not rows:
            return
        self.curs.execute(
            SQL(
                "INSERT INTO {s}.memory_objects (id, namespace, actor, scope, type, content, subject,"
                " attribute, value, tags, selectors, provenance, trust_rank, event_time, recorded_at,"
                " valid_from, status, trust_tier, supersedes, classification, dispute_id, position, erasure_keys)"
                " SELECT id, namespace, actor, scope, type, content, subject, attribute, value, tags::text[],"
                " selectors::text[], provenance::jsonb, trust_rank, event_time, recorded_at, valid_from, status,"
                " trust_tier, supersedes::uuid[], classification::jsonb, NULL, position, erasure_keys::text[]"
                " FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::int[], %b::timestamptz[],"
                " %b::timestamptz[], %b::timestamptz[], %b::text[], %b::text[], %b::text[], %b::text[],"
                " %b::bigint[], %b::text[]) AS w(id, namespace, actor, scope, type, content, subject, attribute,"
                " value, tags, selectors, provenance, trust_rank, event_time, recorded_at, valid_from, status,"
                " trust_tier, supersedes, classification, position, erasure_keys)"
                " ON CONFLICT (id) DO NOTHING"
            ).format(s=self.s),
            columns(rows),
        )

    def _send_superseded(self) -> None:
        rows, self.superseded, self.superseded_ids = self.superseded, [], set()
        if not rows:
            return
        # succession closes valid time; any other kind retires in system time
        self.curs.execute(
            SQL(
                "UPDATE {s}.memory_objects m SET"
                " valid_to = CASE WHEN u.succession THEN u.valid_to ELSE m.valid_to END,"
                " status = CASE WHEN u.succession THEN m.status ELSE 'retired' END,"
                " retired_at = CASE WHEN u.succession THEN m.retired_at ELSE u.at END,"
                " superseded_by = array_append(m.superseded_by, u.by), position = u.position"
                " FROM unnest(%b::uuid[], %b::boolean[], %b::timestamptz[], %b::timestamptz[], %b::uuid[],"
                " %b::bigint[]) AS u(id, succession, valid_to, at, by, position) WHERE m.id = u.id"
            ).format(s=self.s),
            columns(rows),
        )


def _insert_edges(curs: Cursor[Any], s: Identifier, edges: list[tuple[Any, ...]]) -> None:
    """``memory_supersedence`` rows in ledger order (an existing edge is kept, as one by one)."""
    curs.execute(
        SQL(
            "INSERT INTO {s}.memory_supersedence (old_id, new_id, kind, reason, at, valid_to, position)"
            " SELECT * FROM unnest(%b::uuid[], %b::uuid[], %b::text[], %b::text[], %b::timestamptz[],"
            " %b::timestamptz[], %b::bigint[]) ON CONFLICT DO NOTHING"
        ).format(s=s),
        columns(edges),
    )


def _released(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, MemoryReleased)
    curs.execute(
        SQL(
            "UPDATE {s}.memory_objects SET status = 'active', trust_tier = 'canonical',"
            " supersedes = supersedes || %s::uuid[], dispute_id = %s, position = %s WHERE id = %s"
        ).format(s=s),
        (list(e.supersedes), e.dispute_id, r.position, e.memory_id),
    )


def _retired(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, MemoryRetired)
    curs.execute(
        SQL(
            "UPDATE {s}.memory_objects SET status = 'retired', retired_at = %s, dispute_id ="
            " coalesce(%s, dispute_id), superseded_by = superseded_by || %s::uuid[], position = %s"
            " WHERE id = %s"
        ).format(s=s),
        (e.at, e.dispute_id, [e.replaced_by] if e.replaced_by else [], r.position, e.memory_id),
    )


def _retired_edge(r: Recorded) -> tuple[Any, ...] | None:
    """A review's step joins the history: the rejected memory points at the one kept, an
    edited one at its replacement. Fixed reasons only: the reviewer's words may name people."""
    e = r.event
    assert isinstance(e, MemoryRetired)
    linked = e.replaced_by or e.kept
    if linked is None:
        return None
    kind, reason = ("correction", "dispute:edit") if e.replaced_by else ("rejected", "dispute:keep_old")
    return (e.memory_id, linked, kind, reason, e.at, None, r.position)


def _reaffirmed(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, MemoryReaffirmed)
    if e.provenance is None:  # replayed after erasure: nothing left to join
        curs.execute(
            SQL("UPDATE {s}.memory_objects SET position = %s WHERE id = %s").format(s=s),
            (r.position, e.memory_id),
        )
        return
    entry = {"source": e.provenance.source, "actor": e.provenance.actor, "ref": e.provenance.ref}
    curs.execute(
        SQL(
            "UPDATE {s}.memory_objects SET"
            " provenance = CASE WHEN EXISTS (SELECT 1 FROM jsonb_array_elements(provenance) p"
            "   WHERE p->>'source' = %(source)s AND p->>'actor' = %(actor)s"
            "   AND (p->>'ref') IS NOT DISTINCT FROM %(ref)s) THEN provenance"
            "   ELSE provenance || jsonb_build_array(jsonb_build_object('source', %(source)s::text,"
            "     'actor', %(actor)s::text, 'ref', %(ref)s::text, 'content_hash',"
            "     CASE WHEN content IS NULL THEN NULL ELSE encode(sha256(convert_to(content, 'UTF8')), 'hex') END))"
            "   END,"
            " trust_rank = greatest(trust_rank, %(rank)s), trust_tier = coalesce(%(tier)s, trust_tier),"
            " position = %(position)s WHERE id = %(id)s"
        ).format(s=s),
        {
            **entry,
            "rank": rank_of([e.provenance.source]),
            "tier": e.trust_tier,
            "position": r.position,
            "id": e.memory_id,
        },
    )


def _verified(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, MemoryVerified)
    entry = {"actor": e.actor, "supports": e.supports, "at": e.at.isoformat()}
    curs.execute(
        SQL(
            "UPDATE {s}.memory_objects SET verifications = verifications || jsonb_build_array(%s::jsonb),"
            " trust_tier = %s, position = %s WHERE id = %s"
        ).format(s=s),
        (_json.encode(entry).decode(), e.trust_tier, r.position, e.memory_id),
    )


def _erased(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    """Erasure: the row stays as a tombstone; everything the memory said goes, including
    what was derived from it. Its provenance goes whole, and the rank read from it: it is
    sealed with the memory's data key, so a rebuild after the erasure finds none either.
    A memory erased while quarantined keeps that (``erased_in_quarantine``): no read showed
    it before, so none shows its tombstone (``domain.model.memory.erased_tombstone``)."""
    e = r.event
    assert isinstance(e, MemoryErased)
    curs.execute(
        SQL(
            "UPDATE {s}.memory_objects SET status = 'erased', retired_at = coalesce(retired_at, %s),"
            " erased_in_quarantine = erased_in_quarantine OR status = 'disputed',"
            " content = NULL, value = NULL, subject = NULL, attribute = NULL, tags = '{{}}',"
            " selectors = '{{}}', erasure_keys = '{{}}', provenance = '[]'::jsonb, trust_rank = %s,"
            " position = %s WHERE id = %s"
        ).format(s=s),
        (e.at, rank_of(()), r.position, e.memory_id),
    )


_HANDLERS: HandlerMap = {
    MemoryReleased: _released,
    MemoryRetired: _retired,
    MemoryReaffirmed: _reaffirmed,
    MemoryVerified: _verified,
    MemoryErased: _erased,
}
