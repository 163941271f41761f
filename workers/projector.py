"""The projector: one process that follows the ledger into the read models.

``memwarden serve`` starts one beside the API by default, so request threads never share a
process (and its GIL) with the projection work that every syscall's audit record causes.
The API processes only watch how far the read models are (read-your-writes without a
query), and a reader that must wait catches up itself if the projector is gone.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from types import FrameType

from memwarden.bootstrap.allocator import lean_process
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.background import Background

log = logging.getLogger(__name__)
READY_LINE = "projecting"
RESTART_DELAY_SECONDS = 1.0
PARENT_CHECK_SECONDS = 0.5


def run_projector(*, exit_with_parent: bool = False) -> int:
    """``memwarden project``: project until SIGTERM or SIGINT (or, as the child of
    ``memwarden serve``, until that process is gone, however it ended)."""
    trimmer = lean_process()  # before any thread starts
    stop = threading.Event()
    parent = os.getppid()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        with Runtime(follow=True):
            sys.stdout.write(READY_LINE + "\n")
            sys.stdout.flush()
            while not stop.wait(PARENT_CHECK_SECONDS):
                if exit_with_parent and os.getppid() != parent:
                    break
    finally:
        trimmer.stop()
    return 0


class ProjectorProcess(Background):
    """A supervised ``memwarden project`` child: restarted if it dies, stopped with us."""

    def __init__(self, ready_timeout: float = 120.0) -> None:
        super().__init__("projector-supervisor")
        self.ready_timeout = ready_timeout
        self._process = self._spawn()
        self.start()

    def _spawn(self) -> subprocess.Popen[str]:
        """Start the child and wait until it projects: it migrates the embedded default (and
        builds the configured embedder's vector index), so the API processes start after
        it, not at the same time."""
        process = subprocess.Popen(
            [sys.executable, "-m", "memwarden.api.cli.main", "project", "--exit-with-parent"],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        deadline = time.monotonic() + self.ready_timeout
        line = ""
        while (remaining := deadline - time.monotonic()) > 0 and process.poll() is None:
            readable, _, _ = select.select([process.stdout], [], [], min(remaining, 0.5))
            if readable:
                line = process.stdout.readline().strip()
                if line == READY_LINE:
                    return process
        process.kill()
        process.wait()
        msg = f"the projector did not start (exit code {process.returncode}, last output {line!r})"
        raise RuntimeError(msg)

    def _run(self) -> None:
        while not self._stop.is_set():
            code = self._process.wait()
            if self._stop.is_set():
                return
            log.error("projector exited with code %s; restarting it", code)
            self._stop.wait(RESTART_DELAY_SECONDS)
            try:
                self._process = self._spawn()
            except (OSError, RuntimeError):
                log.exception("projector restart failed; readers catch up themselves meanwhile")

    def stop(self) -> None:
        self._stop.set()
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        super().stop()  # the supervisor, woken by its child's exit, sees the stop and ends
