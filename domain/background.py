"""The background threads of a process: one base that starts and stops a thread, and one
supervised loop over it that takes a turn again and again, retrying after a failure and
logging each run of failures twice (when it starts, when it ends) instead of at every retry.

Every long-running thread of memwarden is one of these: the projection followers, the
dispatchers and tickers, the ticket worker, the ledger's sequencer, the audit spool's
drainer, the embedded server's watchdog, the projector's supervisor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

JOIN_SECONDS = 10.0
"""The longest ``stop`` waits for a thread to end (a turn in progress is not interrupted)."""

Outage = Callable[[BaseException], str | None]
"""Names the service a failure says is down (``database``, ``Redis``), or None: a bug."""


class Background:
    """A daemon thread that runs ``_run`` from ``start`` until ``stop``, which sets ``_stop``
    (``_run`` returns when it sees it) and waits for the thread to end."""

    def __init__(self, name: str, join_seconds: float = JOIN_SECONDS) -> None:
        self.thread_name = name
        self.join_seconds = join_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Start the thread; False (and nothing started) while one is running."""
        if self.running:
            return False
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(self.join_seconds)
        self._thread = None

    def _run(self) -> None:
        raise NotImplementedError


class FailureRun:
    """Repeated failures of a background loop, logged once when they start (an outage as one
    line, anything else with its traceback) and once when they end, with the count of
    retries between, instead of once per retry."""

    def __init__(self, label: str, logger: logging.Logger, outage: Outage) -> None:
        """``outage`` names the service an error says is down: that is logged as one line;
        any other failure with its traceback."""
        self.label = label
        self.log = logger
        self.outage = outage
        self.count = 0
        self._since = 0.0

    def failed(self, error: Exception) -> None:
        self.count += 1
        if self.count > 1:
            return
        self._since = time.monotonic()
        down = self.outage(error)
        if down is not None:
            self.log.warning("%s: %s unavailable (%s); retrying", self.label, down, _first_line(error))
        else:
            self.log.exception("%s: failed; retrying", self.label, exc_info=error)

    def ended(self) -> None:
        if self.count:
            self.log.warning(
                "%s: recovered after %d retries in %.1f s",
                self.label,
                self.count,
                time.monotonic() - self._since,
            )
            self.count = 0


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"[:200]


class Supervised(Background):
    """A background loop: ``_turn`` until stopped, resting the seconds each turn asks for
    (none: the next turn at once). A turn that raises is logged by a ``FailureRun`` under
    ``label`` and tried again ``retry_seconds`` later; the turn after the last failure logs
    the recovery. ``first_rest``: the rest before the first turn (a ticker's period)."""

    def __init__(
        self,
        name: str,
        *,
        label: str,
        outage: Outage,
        retry_seconds: float,
        logger: logging.Logger = log,
        first_rest: float = 0.0,
    ) -> None:
        super().__init__(name)
        self.failures = FailureRun(label, logger, outage)
        self.retry_seconds = retry_seconds
        self.first_rest = first_rest

    def _turn(self) -> float:
        """One turn of the loop; the seconds to rest before the next."""
        raise NotImplementedError

    def _failed(self) -> None:
        """After a failed turn, before the rest: drop what the failure left unusable."""

    def _finish(self) -> None:
        """On the way out of the loop."""

    def _rest(self, seconds: float) -> None:
        """Rest until ``seconds`` passed or the loop is stopped."""
        self._stop.wait(seconds)

    def _run(self) -> None:
        if self.first_rest:
            self._rest(self.first_rest)
        try:
            while not self._stop.is_set():
                try:
                    rest = self._turn()
                except Exception as error:  # noqa: BLE001 - logged once per run of failures; tried again
                    self.failures.failed(error)
                    self._failed()
                    rest = self.retry_seconds
                else:
                    self.failures.ended()
                if rest > 0 and not self._stop.is_set():
                    self._rest(rest)
        finally:
            self._finish()
