"""The background threads that follow the ledger with a listening connection.

A *projector* applies batches and, once at the head, sleeps until the ledger announces an
append. A *watcher* applies nothing: it learns from the announcements of whichever process
projects how far the read models are. Both reconnect after a failure and log a run of
failures once when it starts and once when it ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from psycopg import Connection
from psycopg.sql import SQL, Identifier

from memwarden.domain.ledger.database import FailureRun
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


class Follower:
    """At most one background thread, running a step until stopped."""

    def __init__(self, conninfo: Callable[[], str]) -> None:
        self.conninfo = conninfo
        """Asked at each (re)connect: a caller may point the follower elsewhere meanwhile."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, channel: str, step: Step, *, thread: str, label: str) -> bool:
        """Start the thread; False if one is already running."""
        if self._thread is not None:
            return False
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._follow, args=(channel, step, label), name=thread, daemon=True
        )
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _follow(self, channel: str, step: Step, label: str) -> None:
        """Run ``step`` with a listener on ``channel`` until stopped; reconnect after failures."""
        listener: Connection[Any] | None = None
        failures = FailureRun(label, log)
        while not self._stop.is_set():
            try:
                if listener is None:
                    listener = self._listen(channel)
                step(listener)
            except Exception as error:  # noqa: BLE001 - logged by the run; tried again
                failures.failed(error)
                if listener is not None:
                    with contextlib.suppress(Exception):
                        listener.close()
                listener = None
                self._stop.wait(RETRY_SECONDS)
            else:
                failures.ended()
        if listener is not None:
            listener.close()

    def _listen(self, channel: str) -> Connection[Any]:
        listener = Connection.connect(
            self.conninfo(), autocommit=True, connect_timeout=LISTEN_CONNECT_SECONDS
        )
        try:
            listener.execute(SQL("LISTEN {}").format(Identifier(channel)))
        except Exception:
            listener.close()
            raise
        return listener
