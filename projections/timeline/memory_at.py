"""A ``read`` with ``as_of``/``valid_at``: the memory in the shape of a plain read, its
time-dependent fields (content, status, trust tier, validity, retirement, verifications,
successors) as they stood at ``as_of``, and the instants it answers for added.

Whether the caller may see the memory is decided first, as a plain read decides it (its
namespace, an ancestor, or shared with it): a memory it may not see is ``None`` (a plain
404) at every instant, so nothing about its existence leaks across scopes. Only then is a
memory that was not yet known at ``as_of``, or did not hold at ``valid_at``, told apart
from a missing one (``NotValidThen``, a 404 of its own code).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

import msgspec

from memwarden.domain.model.errors import NotValidThen
from memwarden.domain.model.identity import Identity
from memwarden.projections.memory_objects.views import MemoryView

if TYPE_CHECKING:
    from memwarden.projections.reads import ReadModels


class MemoryAt(MemoryView, frozen=True, kw_only=True):
    """A plain read's fields as they stood at ``as_of``, and the instants they answer for."""

    as_of: datetime
    """The instant of system time the memory is shown as known at."""
    valid_at: datetime | None
    """The instant of world time it was asked to hold at (null: not asked)."""
    position: int
    """The ledger position ``as_of`` maps to."""


def read_at(
    reads: ReadModels,
    identity: Identity,
    memory_id: UUID,
    as_of: datetime | None,
    valid_at: datetime | None,
    after: int | None = None,
) -> MemoryAt | None:
    """The memory as known at ``as_of`` (default now) and held at ``valid_at``; None when the
    caller may not see it; ``NotValidThen`` when it may but the memory was not then."""
    now = reads.read(identity, memory_id, after=after)
    if now is None:
        return None
    found = reads.time_travel.lookup([now.namespace], memory_id, as_of, valid_at)
    then = found.memory
    if then is None:
        when = found.as_of.isoformat()
        if found.known is None:
            raise NotValidThen(f"memory {memory_id} was not yet recorded at {when}")
        until = found.known.valid_to.isoformat() if found.known.valid_to else "open"
        msg = (
            f"memory {memory_id} did not hold at {found.valid_at.isoformat() if found.valid_at else when}: "
            f"as known at {when} it held from {found.known.valid_from.isoformat()} to {until}"
        )
        raise NotValidThen(msg)
    fields = msgspec.structs.asdict(now)
    fields.update(
        content=then.content,
        status=then.status,
        trust_tier=then.trust_tier,
        valid_from=then.valid_from,
        valid_to=then.valid_to,
        retired_at=then.retired_at,
        verifications=[v for v in now.verifications if v.at <= found.as_of],
        superseded_by=[] if then.status == "active" else now.superseded_by,
    )
    return MemoryAt(**fields, as_of=found.as_of, valid_at=found.valid_at, position=found.position)
