"""Leases on the ledger: take one, and fence every append of the pass that holds it
(see domain/model/leases.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import NoReturn, TypeVar

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import LeaseEvent
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.leases import (
    Lease,
    LeaseBusy,
    LeaseLost,
    decide_take,
    lease_from,
    lease_id,
    release,
)
from memwarden.domain.services.commands import CommandRunner, Decided, Retry

R = TypeVar("R")
log = logging.getLogger(__name__)

DEFAULT_TTL = timedelta(seconds=30)


class Leases:
    def __init__(self, ledger: Ledger, clock: Callable[[], datetime], ttl: timedelta = DEFAULT_TTL) -> None:
        self.ledger = ledger
        self.clock = clock
        self.ttl = ttl
        self.runner = CommandRunner(ledger, None, lambda: self.clock(), new_uuid)  # noqa: PLW0108

    def current(self, pass_name: str, namespace: str) -> Lease | None:
        stream = lease_id(pass_name, namespace)
        head = self.ledger.stream_heads([stream]).get(stream)
        if head is None or not isinstance(head.event, LeaseEvent):
            return None
        return lease_from(head.event, head.originator_version)

    def acquire(self, pass_name: str, namespace: str, holder: str) -> Lease:
        """Take the lease for ``holder``; ``LeaseBusy`` while a pass holds it. Two takers
        racing for a free lease append the same version: one of them loses."""

        def decide(now: datetime) -> Decided[Lease]:
            current = self.current(pass_name, namespace)
            event = decide_take(current, pass_name, namespace, holder, now, self.ttl)
            version = 0 if current is None else current.version
            return Decided(
                result=lambda _position: lease_from(event, version + 1),
                events=[event],
                versions={event.lease_id: version},
            )

        def busy() -> NoReturn:
            raise LeaseBusy(f"another holder took the {pass_name} lease of this namespace") from None

        return self.runner.run(
            None, pass_name, decide, Retry("the lease is contended", attempts=1, on_conflict=busy)
        )

    def fence(self, lease: Lease) -> Recorded:
        """The event that makes a pass's append the holder's: the lease's release at its
        stream's next version (refused with the whole append once another holder took
        over)."""
        return Recorded(lease.id, lease.version + 1, release(lease, self.clock()))

    def run_fenced(
        self,
        runner: CommandRunner,
        lease: Lease,
        decide: Callable[[datetime, Lease], Decided[R]],
        contended: str,
        identity: Identity | None = None,
    ) -> R:
        """Run a pass in one append fenced by ``lease`` (``fence``). After a conflict the pass
        decides again, on the lease as it is now, while its holder still has it (else
        ``LeaseLost``: nothing of the pass was applied). ``identity``: whose the audit record
        of the append is (an operator's pass), if it has one."""
        held = [lease]

        def fenced(now: datetime) -> Decided[R]:
            decided = decide(now, held[0])
            return replace(decided, fenced=[*decided.fenced, self.fence(held[0])])

        def lease_still_held() -> None:
            held[0] = self.still_held(held[0])

        retry = Retry(contended, on_conflict=lease_still_held)
        try:
            return runner.run(identity, lease.pass_name, fenced, retry)
        except LeaseLost:
            raise
        except Exception:
            self.give_back(held[0])
            raise

    def give_back(self, lease: Lease) -> None:
        """Release ``lease`` on its own, after its pass failed before appending (a read
        model too far behind, the database away): the namespace's next pass need not wait
        for the lease to expire. Best effort: if the release cannot be appended either, the
        lease expires as a dead holder's does."""

        def released(_now: datetime) -> Decided[None]:
            return Decided(result=lambda _position: None, fenced=[self.fence(lease)])

        try:
            self.runner.run(None, lease.pass_name, released, Retry("the lease moved", attempts=1))
        except Exception:  # noqa: BLE001 - the pass's own failure is what its caller must see
            log.info("the %s lease of %s is left to expire", lease.pass_name, lease.namespace)

    def still_held(self, lease: Lease) -> Lease:
        """After a refused append: the lease as it is now if its holder still has it (the
        conflict was elsewhere), else ``LeaseLost``."""
        current = self.current(lease.pass_name, lease.namespace)
        if current is None or current.token != lease.token or current.holder != lease.holder:
            raise LeaseLost(f"the {lease.pass_name} lease was taken over (token {lease.token} is stale)")
        return current
