"""Periodic signed checkpoints (docs/architecture.md section 2): when the chain head is due for one.
Pure: the last checkpoint's position and time, the head, the events since and ``now`` in;
a yes or no out.

A checkpoint is due once ``every_events`` events followed the last one, or once
``every_seconds`` passed and something other than the checkpoint pass itself was
appended meanwhile: an idle ledger is not checkpointed again and again because of the
lease events its own pass adds.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from memwarden.domain.model.events import Event, LeaseEvent

CHECKPOINTS = "checkpoints"
"""The pass's name (its lease)."""
LEDGER_SCOPE = "*"
"""The lease's namespace: the pass covers the whole ledger, which no namespace is."""
OWN_EVENTS = 2
"""At most this many events follow a checkpoint that are the pass's own (the lease it took
before it signed is the head it signed; its release follows): looking at one more tells
whether anything else happened."""


def checkpoint_due(
    last: tuple[int, datetime] | None,
    head: int,
    since: Iterable[Event],
    now: datetime,
    every_events: int,
    every_seconds: float,
) -> bool:
    """Whether the head at ``head`` is due for a checkpoint; ``last`` is the position and
    time of the last one, ``since`` the first events after it (``OWN_EVENTS`` + 1 suffice)."""
    if head <= 0:
        return False
    if last is None:
        return True
    position, signed_at = last
    if head - position >= every_events:
        return True
    if now - signed_at < timedelta(seconds=every_seconds):
        return False
    return any(not (isinstance(e, LeaseEvent) and e.pass_name == CHECKPOINTS) for e in since)
