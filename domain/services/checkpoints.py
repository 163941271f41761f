"""The periodic checkpoint pass (see domain/model/checkpoints.py for when one is due): the
ledger signs its head and keeps the checkpoint (``Ledger.checkpoint``), under a lease.

The worker actor and the in-process loop of ``memwarden serve`` both call
``CheckpointService.periodic``. It is idempotent: a checkpoint that is no longer due is
not made again (checked once more under the lease, so two passes that both saw it due make
one). A holder whose lease was taken over is refused before it signs (``still_held``) and
at its fence; one that stalls between the two could keep one checkpoint more, which is
still a true signature of a head the chain holds.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.model.checkpoints import CHECKPOINTS, LEDGER_SCOPE, OWN_EVENTS, checkpoint_due
from memwarden.domain.model.leases import Lease
from memwarden.domain.ports import TreeRoot
from memwarden.domain.services.commands import CommandRunner, Decided
from memwarden.domain.services.leases import Leases

DEFAULT_EVERY_EVENTS = 1_000
DEFAULT_EVERY_SECONDS = 600.0


class CheckpointService:
    def __init__(
        self,
        ledger: Ledger,
        runner: CommandRunner,
        leases: Leases,
        clock: Callable[[], datetime],
        tree_root: TreeRoot,
        every_events: int = DEFAULT_EVERY_EVENTS,
        every_seconds: float = DEFAULT_EVERY_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.runner = runner
        self.leases = leases
        self.clock = clock
        self.tree_root = tree_root
        """The Merkle tree's root of a size (the ``merkle`` read model): what the note signs."""
        self.every_events = every_events
        self.every_seconds = every_seconds

    def due(self) -> bool:
        kept = self.ledger.checkpoint_log.newest(1)
        last = kept[0].checkpoint if kept else None
        since = self.ledger.read(last.position, OWN_EVENTS + 1) if last is not None else []
        return checkpoint_due(
            (last.position, last.time) if last is not None else None,
            self.ledger.head_position(),
            (r.event for r in since),
            self.clock(),
            self.every_events,
            self.every_seconds,
        )

    def periodic(self, holder: str) -> Checkpoint | None:
        """The pass: a checkpoint when one is due, under ``holder``'s lease; None when none
        is due. ``LeaseBusy``: another pass is making it."""
        if not self.due():
            return None
        return self.make(self.leases.acquire(CHECKPOINTS, LEDGER_SCOPE, holder))

    def make(self, lease: Lease) -> Checkpoint | None:
        """Under ``lease``: the checkpoint if it is still due, then the lease released.
        ``LeaseLost``: another holder took the lease over; this one signs nothing."""
        lease = self.leases.still_held(lease)
        made = self.ledger.checkpoint(self.tree_root) if self.due() else None

        def release(_now: datetime, _held: Lease) -> Decided[Checkpoint | None]:
            return Decided(result=lambda _position: made)

        return self.leases.run_fenced(self.runner, lease, release, f"the {CHECKPOINTS} lease kept changing")
