"""Signed checkpoints kept on the ledger: on demand, and by a periodic pass under a lease
(see domain/model/checkpoints.py for when one is due).

The worker actor and the in-process loop of ``memwarden serve`` both call
``CheckpointService.periodic``; it is idempotent (a checkpoint that is no longer due is not
made again) and single-flight (the lease; and the checkpoints' one stream, whose next
version only one append takes).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import msgspec

from domain.ledger.app import Ledger, StreamConflict
from domain.ledger.checkpoints import Checkpoint
from domain.ledger.mapper import Recorded
from domain.model.checkpoints import (
    CHECKPOINT_STREAM,
    CHECKPOINTS,
    LEDGER_SCOPE,
    OWN_EVENTS,
    PERIODIC,
    checkpoint_due,
)
from domain.model.events import CheckpointRecorded
from domain.model.leases import Lease
from domain.services.leases import Leases
from domain.services.memory import MAX_ATTEMPTS, TooMuchContention

DEFAULT_EVERY_EVENTS = 1_000
DEFAULT_EVERY_SECONDS = 600.0


class RecordedCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A checkpoint as the ledger keeps it: the signed head, who made it, its place in the
    list (``sequence``, the cursor of a page) and the position of its record."""

    checkpoint: Checkpoint
    by: str
    sequence: int
    recorded_at: datetime
    recorded_position: int


class CheckpointService:
    def __init__(
        self,
        ledger: Ledger,
        leases: Leases,
        clock: Callable[[], datetime],
        every_events: int = DEFAULT_EVERY_EVENTS,
        every_seconds: float = DEFAULT_EVERY_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.leases = leases
        self.clock = clock
        self.every_events = every_events
        self.every_seconds = every_seconds

    def record(self, by: str, lease: Lease | None = None) -> RecordedCheckpoint:
        """Sign the head and keep the checkpoint, in one append (fenced by ``lease``)."""
        for _ in range(MAX_ATTEMPTS):
            last = self.ledger.stream_heads([CHECKPOINT_STREAM]).get(CHECKPOINT_STREAM)
            version = last.originator_version + 1 if last is not None else 1
            now = self.clock()
            signed = self.ledger.checkpoint(now)
            event = CheckpointRecorded(
                checkpoint_id=CHECKPOINT_STREAM,
                position=signed.position,
                hash=signed.hash,
                signed_at=signed.time,
                key_id=signed.key_id,
                signature=signed.signature,
                by=by,
                token=lease.token if lease is not None else 0,
                at=now,
            )
            recorded = [Recorded(CHECKPOINT_STREAM, version, event)]
            if lease is not None:
                recorded.append(self.leases.fence(lease))
            try:
                position = self.ledger.append(recorded)
            except StreamConflict:
                if lease is not None:
                    lease = self.leases.still_held(lease)
                continue
            return _recorded(event, version, position - len(recorded) + 1)
        raise TooMuchContention("checkpoints kept being recorded meanwhile; retry")

    def due(self) -> bool:
        last = self.latest()
        event = last.event if last is not None else None
        assert event is None or isinstance(event, CheckpointRecorded)
        since = self.ledger.read(event.position, OWN_EVENTS + 1) if event is not None else []
        return checkpoint_due(
            event,
            self.ledger.head_position(),
            (r.event for r in since),
            self.clock(),
            self.every_events,
            self.every_seconds,
        )

    def periodic(self, holder: str) -> RecordedCheckpoint | None:
        """The pass: a checkpoint when one is due, under ``holder``'s lease; None when none
        is due. ``LeaseBusy``: another pass is making it."""
        if not self.due():
            return None
        lease = self.leases.acquire(CHECKPOINTS, LEDGER_SCOPE, holder)
        if not self.due():  # another pass made it between the look and the lease
            self.ledger.append([self.leases.fence(lease)])
            return None
        return self.record(PERIODIC, lease)

    def latest(self) -> Recorded | None:
        return self.ledger.stream_heads([CHECKPOINT_STREAM]).get(CHECKPOINT_STREAM)

    def page(self, limit: int, before: int | None = None) -> list[RecordedCheckpoint]:
        """The checkpoints kept, newest first: ``limit`` of them below ``before`` (a
        ``sequence`` of an earlier page)."""
        rows = self.ledger.stream_page(CHECKPOINT_STREAM, limit, before)
        found: list[RecordedCheckpoint] = []
        for row in rows:
            assert isinstance(row.event, CheckpointRecorded)
            found.append(_recorded(row.event, row.originator_version, int(row.position or 0)))
        return found


def _recorded(event: CheckpointRecorded, sequence: int, position: int) -> RecordedCheckpoint:
    return RecordedCheckpoint(
        checkpoint=Checkpoint(
            position=event.position,
            hash=event.hash,
            time=event.signed_at,
            key_id=event.key_id,
            signature=event.signature,
        ),
        by=event.by,
        sequence=sequence,
        recorded_at=event.at,
        recorded_position=position,
    )
