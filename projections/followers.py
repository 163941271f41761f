"""The background threads that follow the ledger with a listening connection.

A *projector* applies batches and, once at the head, sleeps until the ledger announces an
append. A *watcher* applies nothing: it learns from the announcements of whichever process
projects how far the read models are. Both reconnect after a failure and log a run of
failures once when it starts and once when it ends.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.domain.background import Supervised
from memwarden.domain.ledger.database import database_outage
from memwarden.projections.tracking import Position

log = logging.getLogger(__name__)

RETRY_SECONDS = 0.5
"""The pause before a background thread tries again after a failure."""
LISTEN_CONNECT_SECONDS = 5
"""The longest a background thread waits for its listening connection to open."""
NOTIFY_WAIT_SECONDS = 0.2
"""The longest one step waits for an announcement (so a stop is seen promptly)."""

Step = Callable[[Connection[Any]], None]
"""One turn of a follower, given the connection listening on its channel."""


def projecting(apply_next: Callable[[], bool]) -> Step:
    """A projector's step: ``apply_next`` applies a batch and says whether it reached the
    head; there, an append after this batch's read announces itself, so wait for it."""

    def step(listener: Connection[Any]) -> None:
        if apply_next():
            for _ in listener.notifies(timeout=NOTIFY_WAIT_SECONDS, stop_after=1):
                pass

    return step


def watching(learn: Callable[[Position], None]) -> Step:
    """A watcher's step: pass on each position a projector announced."""

    def step(listener: Connection[Any]) -> None:
        for notice in listener.notifies(timeout=NOTIFY_WAIT_SECONDS):
            learn(Position(int(notice.payload)))

    return step


class Follower(Supervised):
    """A background thread running ``step`` with a connection listening on ``channel``
    until stopped; after a failure it connects again."""

    def __init__(
        self, conninfo: Callable[[], str], channel: str, step: Step, *, thread: str, label: str
    ) -> None:
        """``conninfo`` is asked at each (re)connect: a caller may point the follower
        elsewhere meanwhile."""
        super().__init__(thread, label=label, outage=database_outage, retry_seconds=RETRY_SECONDS, logger=log)
        self.conninfo = conninfo
        self.channel = channel
        self.step = step
        self._listener: Connection[Any] | None = None

    def _turn(self) -> float:
        if self._listener is None:
            self._listener = self._listen()
        self.step(self._listener)
        return 0.0

    def _failed(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
        self._listener = None

    def _finish(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _listen(self) -> Connection[Any]:
        listener = Connection.connect(
            self.conninfo(), autocommit=True, connect_timeout=LISTEN_CONNECT_SECONDS
        )
        try:
            listener.execute(SQL("LISTEN {}").format(Identifier(self.channel)))
        except Exception:
            listener.close()
            raise
        return listener
