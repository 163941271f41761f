"""``memwarden worker``, and the autopilot that ``memwarden serve`` runs itself when no
Redis answers (so the embedded default judges memories with nothing installed)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from memwarden.domain.settings import Settings

log = logging.getLogger(__name__)


def cmd_worker(args: argparse.Namespace) -> int:
    """The dispatcher and the actors until SIGTERM or SIGINT."""
    settings = Settings.from_env()
    from memwarden.workers.actors import redis_reachable  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them
    from memwarden.workers.main import run_worker  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them

    if not redis_reachable(settings):
        sys.stderr.write(
            f"memwarden worker: no Redis answers at {settings.redis_url} (REDIS_URL);"
            " `memwarden serve` runs the passes in-process without one\n"
        )
        return 2
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stdout.write("memwarden worker: running\n")
    sys.stdout.flush()
    run_worker(settings, stop, threads=args.threads)
    return 0


def register_worker_command(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="the Dramatiq actors (autopilot, consolidation, checkpoints, async writes) and dispatchers",
    )
    worker.add_argument("--threads", type=int, default=2, help="actor threads of this process")
    worker.set_defaults(handler=cmd_worker)


class ServeAutopilot:
    """``memwarden serve`` without Redis: the passes run in this process, on a runtime of
    its own that projects nothing (the API projects; a wait helps if nobody does)."""

    def __init__(self, settings: Settings) -> None:
        from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

        self.runtime = Runtime(settings, follow=False)
        from memwarden.workers.main import InProcessAutopilot  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them

        self.autopilot = InProcessAutopilot(self.runtime)
        self.autopilot.start()

    def stop(self) -> None:
        self.autopilot.stop()
        self.runtime.close()


def serve_autopilot(settings: Settings) -> ServeAutopilot | None:
    """The in-process autopilot, unless a Redis answers (then `memwarden worker` runs it,
    and the async write tickets too: the API processes send them to it, unless
    ``MEMWARDEN_TICKETS`` says otherwise)."""
    from memwarden.workers.actors import redis_reachable  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them

    if redis_reachable(settings):
        os.environ.setdefault("MEMWARDEN_TICKETS", "queue")
        return None
    log.warning("no Redis at %s: the conflict autopilot runs inside `memwarden serve`", settings.redis_url)
    return ServeAutopilot(settings)
