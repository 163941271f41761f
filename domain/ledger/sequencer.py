"""The ledger's sequencer, with a chain per tenant (``MEMWARDEN_LEDGER_CHAINS=tenant``).

A tenant-chain append commits its events on the tenant's chain first, with no global
position ("pending"), and sequences them onto the notification log in a second transaction
(domain/ledger/recorder.py). An appender that dies between the two leaves its events
committed and unsequenced: no projection would ever read them. The ledger that owns the
recorder sequences them itself, in a thread of its own, so the notification log holds every
commit whoever follows it; the read side only reads.

At start, whatever is pending is sequenced at once. Afterwards the sequencer looks once a
``CHECK_SECONDS``: an event still pending since the last look was left by an appender that
died (a live one sequences within milliseconds), and is sequenced then. Sequencing what a
live appender is about to sequence is harmless: the appender finds it done.
"""

from __future__ import annotations

import logging

from memwarden.domain.background import Supervised
from memwarden.domain.ledger.database import database_outage
from memwarden.domain.ledger.recorder import ChainedApplicationRecorder

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0
"""How often the sequencer looks for events committed without a global position."""


class PendingSequencer(Supervised):
    """Sequences the events a tenant-chain appender committed and did not sequence."""

    def __init__(self, recorder: ChainedApplicationRecorder, every: float = CHECK_SECONDS) -> None:
        super().__init__(
            "memwarden-ledger-sequencer",
            label="ledger sequencer",
            outage=database_outage,
            retry_seconds=every,
            logger=log,
        )
        self.recorder = recorder
        self.every = every
        self._seen: tuple[str, int] | None = None
        self._started = False

    def _turn(self) -> float:
        oldest = self.recorder.oldest_pending()
        if oldest is not None and (not self._started or oldest == self._seen):
            sequenced = self.recorder.sequence()
            if sequenced:
                log.warning("sequenced %s events an appender committed but did not sequence", sequenced)
            oldest = self.recorder.oldest_pending()
        self._seen = oldest
        self._started = True
        return self.every
