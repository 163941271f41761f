"""Audit records of syscalls: how one is made fit for the ledger.

The command runner (domain/services/commands.py) appends a syscall's record in the same
append as its work, and a refusal, a miss or a failure on its own, so every outcome is on
the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from memwarden.domain.model.events import AuditOutcome, AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.text import escape_unprintable

MAX_DETAIL = 200


def safe_detail(detail: str) -> str:
    """An audit detail fit for the ledger and every projection: at most ``MAX_DETAIL``
    characters, nothing unprintable (a NUL or a lone surrogate quoted from a caller's text
    or a file name is written as its escape, never stored raw)."""
    return escape_unprintable(detail[:MAX_DETAIL])[:MAX_DETAIL]


def audit_record(
    record_id: UUID,
    identity: Identity | None,
    op: str,
    outcome: AuditOutcome,
    detail: str,
    now: datetime,
    subjects: Sequence[UUID] = (),
) -> AuditRecorded:
    """The record of one syscall; ``identity`` None: a request without a valid key."""
    return AuditRecorded(
        record_id=record_id,
        actor=identity.actor if identity else "anonymous",
        namespace=identity.namespace if identity else "",
        role=identity.role if identity else "none",
        op=op,
        outcome=outcome,
        detail=safe_detail(detail),
        subject_ids=tuple(subjects),
        at=now,
    )
