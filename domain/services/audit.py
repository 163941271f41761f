"""Audit records of syscalls, shared by every service.

A syscall's record goes into the same append as its work (``event``); a refusal, a
miss or a failure is appended on its own (``record``), so every outcome is on the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal, TypeVar
from uuid import UUID

from domain.ledger.app import Ledger
from domain.ledger.database import unavailable
from domain.ledger.mapper import Recorded
from domain.model.errors import DomainError, NotFound
from domain.model.events import AuditRecorded
from domain.model.identity import Identity
from domain.model.text import escape_unprintable

AuditOutcome = Literal["ok", "denied", "miss", "error"]
T = TypeVar("T")
MAX_DETAIL = 200


def safe_detail(detail: str) -> str:
    """An audit detail fit for the ledger and every projection: at most ``MAX_DETAIL``
    characters, nothing unprintable (a NUL or a lone surrogate quoted from a caller's text
    or a file name is written as its escape, never stored raw)."""
    return escape_unprintable(detail[:MAX_DETAIL])[:MAX_DETAIL]


class Audit:
    def __init__(self, ledger: Ledger, clock: Callable[[], datetime], new_id: Callable[[], UUID]) -> None:
        self.ledger = ledger
        self.clock = clock
        self.new_id = new_id

    def event(
        self,
        identity: Identity,
        op: str,
        outcome: AuditOutcome,
        detail: str,
        now: datetime,
        subject_id: UUID | None = None,
    ) -> AuditRecorded:
        return AuditRecorded(
            record_id=self.new_id(),
            actor=identity.actor,
            namespace=identity.namespace,
            role=identity.role,
            op=op,
            outcome=outcome,
            detail=safe_detail(detail),
            subject_ids=(subject_id,) if subject_id is not None else (),
            at=now,
        )

    def record(
        self, identity: Identity, op: str, outcome: AuditOutcome, detail: str, subject_id: UUID | None = None
    ) -> int:
        """Append an audit record on its own; return its position."""
        audit = self.event(identity, op, outcome, detail, self.clock(), subject_id)
        return self.ledger.append([Recorded(audit.record_id, 1, audit)])

    def audited(self, identity: Identity, op: str, run: Callable[[], T]) -> T:
        """Run a syscall: a refusal is audited (denied, or miss for not found) and so is
        a failure (error); a successful run appends its own record with its work."""
        try:
            return run()
        except DomainError as error:
            outcome: AuditOutcome = "miss" if isinstance(error, NotFound) else "denied"
            self.record(identity, op, outcome, f"{error.code}: {error.detail}")
            raise
        except Exception as error:
            if unavailable(error):  # the record would wait for the same database, and fail
                raise
            try:
                self.record(identity, op, "error", type(error).__name__)
            except Exception as audit_error:  # the ledger itself may be what failed
                raise error from audit_error
            raise
