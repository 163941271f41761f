"""The ``autopilot`` read model: findings for reviewers, automatic settlements (decisions)
and each memory's latest judgement outcome (what ``stats`` counts as unjudged)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.autopilot import finding_group
from memwarden.domain.model.events import (
    ConflictSettled,
    ConflictsJudged,
    FindingOpened,
    FindingResolved,
    LeaseReleased,
    LeaseTaken,
    MemoryErased,
    ProposalApproved,
    ProposalDrafted,
    ProposalEdited,
    ProposalRejected,
    ProposalTextDrafted,
    SettlementOverturned,
)
from memwarden.projections.base import HandlerMap
from memwarden.projections.sanitize import sanitized

_TABLES = """
CREATE TABLE IF NOT EXISTS {s}.findings (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    memory_a uuid NOT NULL,
    memory_b uuid NOT NULL,
    judge text NOT NULL,
    rule text NOT NULL,
    explanation text NOT NULL,
    cosine double precision NOT NULL,
    status text NOT NULL,
    decision text,
    reviewer text,
    resolution_reason text,
    opened_at timestamptz NOT NULL,
    resolved_at timestamptz,
    position bigint NOT NULL,
    group_id uuid NOT NULL
);
CREATE INDEX IF NOT EXISTS findings_open ON {s}.findings (namespace) WHERE status = 'open';
CREATE INDEX IF NOT EXISTS findings_group ON {s}.findings (group_id, opened_at);
CREATE INDEX IF NOT EXISTS findings_order ON {s}.findings (opened_at, id);
CREATE TABLE IF NOT EXISTS {s}.autopilot_decisions (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    winner uuid NOT NULL,
    loser uuid NOT NULL,
    judge text NOT NULL,
    rule text NOT NULL,
    explanation text NOT NULL,
    dial text NOT NULL,
    status text NOT NULL,
    reviewer text,
    overturn_reason text,
    restored uuid,
    settled_at timestamptz NOT NULL,
    overturned_at timestamptz,
    position bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS autopilot_decisions_namespace ON {s}.autopilot_decisions (namespace);
CREATE INDEX IF NOT EXISTS autopilot_decisions_order ON {s}.autopilot_decisions (settled_at, id);
CREATE TABLE IF NOT EXISTS {s}.autopilot_judged (
    memory_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    outcome text NOT NULL,
    judge text,
    pairs int NOT NULL,
    contradictions int NOT NULL,
    position bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.proposals (
    id uuid PRIMARY KEY,
    namespace text NOT NULL,
    kind text NOT NULL,
    sources uuid[] NOT NULL,
    canonical uuid NOT NULL,
    drafter text NOT NULL,
    status text NOT NULL,
    edited boolean NOT NULL,
    reviewer text,
    document_id uuid,
    drafted_at timestamptz NOT NULL,
    reviewed_at timestamptz,
    position bigint NOT NULL,
    fallback text
);
CREATE INDEX IF NOT EXISTS proposals_pending ON {s}.proposals (namespace) WHERE status = 'pending_review';
CREATE INDEX IF NOT EXISTS proposals_order ON {s}.proposals (drafted_at, id);
CREATE TABLE IF NOT EXISTS {s}.autopilot_leases (
    id uuid PRIMARY KEY,
    pass_name text NOT NULL,
    namespace text NOT NULL,
    holder text NOT NULL,
    token bigint NOT NULL,
    released boolean NOT NULL,
    takeovers bigint NOT NULL
)
"""


class AutopilotProjection:
    name = "autopilot"
    tables = ("findings", "autopilot_decisions", "autopilot_judged", "autopilot_leases", "proposals")

    def create(self, curs: Cursor[Any], schema: str) -> None:
        for statement in _TABLES.split(";"):
            curs.execute(SQL(statement.strip()).format(s=Identifier(schema)))

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, _SANITIZED)
        s = Identifier(schema)
        for r in events:
            handler = _HANDLERS.get(type(r.event))
            if handler is not None:
                handler(curs, s, r)
        erased = [r.event.memory_id for r in events if isinstance(r.event, MemoryErased)]
        if erased:
            _forget_reviewer_text(curs, s, erased)


_SANITIZED = (
    ConflictsJudged,
    FindingOpened,
    FindingResolved,
    ConflictSettled,
    SettlementOverturned,
    MemoryErased,
    ProposalDrafted,
    ProposalTextDrafted,
    ProposalEdited,
    ProposalApproved,
    ProposalRejected,
)
"""The events whose caller text is made safe before it reaches a table."""


def _lease_taken(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    """A take from a holder that never released the lease counts as a takeover."""
    e = r.event
    assert isinstance(e, LeaseTaken)
    curs.execute(
        SQL(
            "INSERT INTO {s}.autopilot_leases (id, pass_name, namespace, holder, token, released,"
            " takeovers) VALUES (%(id)s, %(pass)s, %(ns)s, %(holder)s, %(token)s, false, 0)"
            " ON CONFLICT (id) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token,"
            " released = false, takeovers = {s}.autopilot_leases.takeovers"
            " + (NOT {s}.autopilot_leases.released)::int"
        ).format(s=s),
        {"id": e.lease_id, "pass": e.pass_name, "ns": e.namespace, "holder": e.holder, "token": e.token},
    )


def _lease_released(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, LeaseReleased)
    curs.execute(
        SQL("UPDATE {s}.autopilot_leases SET released = true WHERE id = %s AND token = %s").format(s=s),
        (e.lease_id, e.token),
    )


def _conflicts_judged(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, ConflictsJudged)
    curs.execute(
        SQL(
            "INSERT INTO {s}.autopilot_judged (memory_id, namespace, outcome, judge, pairs,"
            " contradictions, position) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (memory_id) DO UPDATE SET outcome = EXCLUDED.outcome,"
            " judge = EXCLUDED.judge, pairs = EXCLUDED.pairs,"
            " contradictions = EXCLUDED.contradictions, position = EXCLUDED.position"
        ).format(s=s),
        (e.memory_id, e.namespace, e.outcome, e.judge, e.pairs, e.contradictions, r.position),
    )


def _finding_opened(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, FindingOpened)
    curs.execute(
        SQL(
            "INSERT INTO {s}.findings (id, namespace, memory_a, memory_b, judge, rule, explanation,"
            " cosine, status, opened_at, position, group_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s,"
            " 'open', %s, %s, %s) ON CONFLICT (id) DO NOTHING"
        ).format(s=s),
        (
            e.finding_id,
            e.namespace,
            e.memory_a,
            e.memory_b,
            e.judge,
            e.rule,
            e.explanation,
            e.cosine,
            e.at,
            r.position,
            finding_group(e),
        ),
    )


def _finding_resolved(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, FindingResolved)
    curs.execute(
        SQL(
            "UPDATE {s}.findings SET status = 'resolved', decision = %s, reviewer = %s,"
            " resolution_reason = %s, resolved_at = %s, position = %s WHERE id = %s"
        ).format(s=s),
        (e.decision, e.reviewer, e.reason, e.at, r.position, e.finding_id),
    )


def _conflict_settled(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, ConflictSettled)
    curs.execute(
        SQL(
            "INSERT INTO {s}.autopilot_decisions (id, namespace, winner, loser, judge, rule,"
            " explanation, dial, status, settled_at, position) VALUES (%s, %s, %s, %s, %s, %s,"
            " %s, %s, 'settled', %s, %s) ON CONFLICT (id) DO NOTHING"
        ).format(s=s),
        (
            e.decision_id,
            e.namespace,
            e.winner,
            e.loser,
            e.judge,
            e.rule,
            e.explanation,
            e.dial,
            e.at,
            r.position,
        ),
    )


def _settlement_overturned(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    e = r.event
    assert isinstance(e, SettlementOverturned)
    curs.execute(
        SQL(
            "UPDATE {s}.autopilot_decisions SET status = 'overturned', reviewer = %s,"
            " overturn_reason = %s, restored = %s, overturned_at = %s, position = %s WHERE id = %s"
        ).format(s=s),
        (e.reviewer, e.reason, e.restored, e.at, r.position, e.decision_id),
    )


def _forget_reviewer_text(curs: Cursor[Any], s: Identifier, erased: list[UUID]) -> None:
    """A reviewer's free text about an erased memory goes with it."""
    curs.execute(
        SQL(
            "UPDATE {s}.findings SET resolution_reason = NULL WHERE resolution_reason IS NOT NULL"
            " AND (memory_a = ANY(%(ids)s) OR memory_b = ANY(%(ids)s))"
        ).format(s=s),
        {"ids": erased},
    )
    curs.execute(
        SQL(
            "UPDATE {s}.autopilot_decisions SET overturn_reason = NULL WHERE overturn_reason IS NOT NULL"
            " AND (winner = ANY(%(ids)s) OR loser = ANY(%(ids)s) OR restored = ANY(%(ids)s))"
        ).format(s=s),
        {"ids": erased},
    )


def _proposal(curs: Cursor[Any], s: Identifier, r: Recorded) -> None:
    """Proposals for reviewers; an edit's text stays sealed on the ledger (only ``edited``)."""
    e = r.event
    if isinstance(e, ProposalDrafted):
        curs.execute(
            SQL(
                "INSERT INTO {s}.proposals (id, namespace, kind, sources, canonical, drafter, status, edited,"
                " drafted_at, position, fallback)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'pending_review', false, %s, %s, %s)"
                " ON CONFLICT (id) DO NOTHING"
            ).format(s=s),
            (
                e.proposal_id,
                e.namespace,
                e.kind,
                list(e.sources),
                e.canonical,
                e.drafter,
                e.at,
                r.position,
                e.fallback,
            ),
        )
    elif isinstance(e, ProposalTextDrafted):  # its text stays sealed on the ledger
        curs.execute(
            SQL("UPDATE {s}.proposals SET position = %s WHERE id = %s").format(s=s),
            (r.position, e.proposal_id),
        )
    elif isinstance(e, ProposalEdited):
        curs.execute(
            SQL("UPDATE {s}.proposals SET edited = true, reviewer = %s, position = %s WHERE id = %s").format(
                s=s
            ),
            (e.reviewer, r.position, e.proposal_id),
        )
    elif isinstance(e, ProposalApproved | ProposalRejected):
        document = e.document_id if isinstance(e, ProposalApproved) else None
        status = "approved" if isinstance(e, ProposalApproved) else "rejected"
        curs.execute(
            SQL(
                "UPDATE {s}.proposals SET status = %s, reviewer = %s, document_id = %s, reviewed_at = %s,"
                " position = %s WHERE id = %s"
            ).format(s=s),
            (status, e.reviewer, document, e.at, r.position, e.proposal_id),
        )


_HANDLERS: HandlerMap = {
    LeaseTaken: _lease_taken,
    LeaseReleased: _lease_released,
    ConflictsJudged: _conflicts_judged,
    ProposalDrafted: _proposal,
    ProposalTextDrafted: _proposal,
    ProposalEdited: _proposal,
    ProposalApproved: _proposal,
    ProposalRejected: _proposal,
    FindingOpened: _finding_opened,
    FindingResolved: _finding_resolved,
    ConflictSettled: _conflict_settled,
    SettlementOverturned: _settlement_overturned,
}
