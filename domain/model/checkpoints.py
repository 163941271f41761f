"""Periodic signed checkpoints (DESIGN.md section 2): when the chain head is due for one,
and what a checkpoint records. Pure: the last checkpoint, the head, the events since and
``now`` in; a yes or no, or an event, out.

A checkpoint is due once ``every_events`` events followed the last one, or once
``every_seconds`` passed and something other than the checkpoint pass itself was
appended meanwhile: an idle ledger is not checkpointed again and again by the events its
own checkpoints (and their leases) add.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from uuid import NAMESPACE_URL, uuid5

from domain.model.events import CheckpointRecorded, Event, LeaseEvent

CHECKPOINTS = "checkpoints"
"""The pass's name (its lease)."""
LEDGER_SCOPE = "*"
"""The lease's namespace: the pass covers the whole ledger, which no namespace is."""
PERIODIC = "periodic"
CHECKPOINT_STREAM = uuid5(NAMESPACE_URL, "memwarden:checkpoints")
OWN_EVENTS = 3
"""At most this many events follow a checkpoint that are the pass's own (its record, the
lease taken before it signs, the lease released with it): looking at one more tells
whether anything else happened."""


def checkpoint_due(
    last: CheckpointRecorded | None,
    head: int,
    since: Iterable[Event],
    now: datetime,
    every_events: int,
    every_seconds: float,
) -> bool:
    """Whether the head at ``head`` is due for a checkpoint; ``since`` are the first
    events after ``last`` (``OWN_EVENTS`` + 1 of them suffice)."""
    if head <= 0:
        return False
    if last is None:
        return True
    if head - last.position >= every_events:
        return True
    if now - last.signed_at < timedelta(seconds=every_seconds):
        return False
    return any(not _own(event) for event in since)


def _own(event: Event) -> bool:
    if isinstance(event, CheckpointRecorded):
        return True
    return isinstance(event, LeaseEvent) and event.pass_name == CHECKPOINTS
