"""What the memory commands (writes, disputes, verification) share, built once by
``MemoryService`` and handed to each of its parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.ports import CommandLedger
from memwarden.domain.services.claims import ClaimIds
from memwarden.domain.services.commands import CommandRunner
from memwarden.domain.services.streams import Streams
from memwarden.domain.services.vectors import Embedding


@dataclass(frozen=True)
class MemoryContext:
    ledger: CommandLedger
    streams: Streams
    """The stream loader, with its cache of the states the deciders read."""
    runner: CommandRunner
    claim_ids: ClaimIds
    policy_for: Callable[[str], WritePolicy]
    """A namespace's write policy."""
    embedding: Embedding
    """The embedding new memories are sealed with."""
    new_id: Callable[[], UUID]
    """Ids of new memories, disputes and reviews (asked at each use: a caller may swap it)."""
