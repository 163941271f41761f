"""``memwarden worker``, and the autopilot that ``memwarden serve`` runs itself when
``REDIS_URL`` is unset (so the embedded default judges memories with nothing installed).

Whether the passes go to Redis is the operator's word (``REDIS_URL``), never a probe: a
Redis that happens to answer on the default port may be another program's, and passes sent
there would wait forever for a worker that never comes."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

from memwarden.domain.settings import Settings
from memwarden.workers.logs import configure_logging, redact

log = logging.getLogger(__name__)


def cmd_worker(args: argparse.Namespace) -> int:
    """The dispatcher and the actors until SIGTERM or SIGINT."""
    settings = Settings.from_env()
    if settings.redis_url is None:
        sys.stderr.write(
            "memwarden worker: REDIS_URL is not set. The worker takes its passes from Redis: set"
            " REDIS_URL (the same for `memwarden serve`), or run `memwarden serve` alone, which"
            " runs the passes itself without one\n"
        )
        return 2
    from memwarden.workers.actors import redis_reachable  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them
    from memwarden.workers.main import run_worker  # noqa: PLC0415 - dramatiq and the runtime: only the commands that run them

    if not redis_reachable(settings):
        sys.stderr.write(f"memwarden worker: no Redis answers at {redact(settings.redis_url)} (REDIS_URL)\n")
        return 2
    from memwarden.bootstrap.allocator import lean_process  # noqa: PLC0415 - only the commands that run long

    trimmer = lean_process()  # before any thread starts
    configure_logging(args.log_level, settings.log_format)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sys.stdout.write("memwarden worker: running\n")
    sys.stdout.flush()
    try:
        run_worker(settings, stop, threads=args.threads)
    finally:
        trimmer.stop()
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """The background passes at a glance: who runs them, whether anyone consumes them, and
    what waits (unjudged memories, how far each dispatcher is behind). Exit 1 when nobody
    consumes them, so a cron job or a probe can alert on it."""
    import msgspec  # noqa: PLC0415 - only this command

    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it
    from memwarden.workers.heartbeats import passes_probe  # noqa: PLC0415 - dramatiq: only the commands that need it

    settings = Settings.from_env()
    with Runtime(settings, follow=False) as runtime:
        gauges = runtime.reads.worker_gauges()
        head = runtime.ledger.head_position()
    health = passes_probe(settings).health()
    lag = {name: head - at for name, at in sorted(gauges.dispatch_positions.items())}
    if args.json:
        body = {
            "passes": msgspec.structs.asdict(health),
            "unjudged": gauges.unjudged,
            "open_findings": gauges.open_findings,
            "dispatch_lag": lag,
        }
        sys.stdout.write(msgspec.json.encode(body).decode() + "\n")
    else:
        state = "consumed" if health.consuming else f"NOT CONSUMED: {health.detail}"
        lines = [f"passes: {health.runner}, {state}"]
        if health.workers is not None:
            lines.append(
                f"workers alive: {health.workers}; queued: {health.queued}; idle: {health.idle_seconds} s"
            )
        lines.append(f"unjudged memories: {gauges.unjudged}; open findings: {gauges.open_findings}")
        lines.append("dispatch lag: " + (", ".join(f"{k} {v}" for k, v in lag.items()) or "none"))
        sys.stdout.write("\n".join(lines) + "\n")
    return 0 if health.consuming else 1


def register_worker_command(sub: Any) -> None:
    worker = sub.add_parser(
        "worker",
        help="the Dramatiq actors (autopilot, consolidation, checkpoints, async writes) and dispatchers",
    )
    worker.add_argument("--threads", type=int, default=2, help="actor threads of this process")
    worker.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="info: one line per pass (pass, namespace, position, result, duration);"
        " MEMWARDEN_LOG_FORMAT=json makes each line a JSON object",
    )
    worker.set_defaults(handler=cmd_worker)
    stats = sub.add_parser(
        "stats",
        help="the background passes: who runs them, whether anyone consumes them (exit 1 if not), what waits",
    )
    stats.add_argument("--json", action="store_true", help="one JSON object")
    stats.set_defaults(handler=cmd_stats)


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
    """The in-process autopilot, unless ``REDIS_URL`` is set (then `memwarden worker` runs
    it, and the async write tickets too: with ``REDIS_URL``, ``Settings.tickets`` is
    ``queue`` unless ``MEMWARDEN_TICKETS`` says otherwise). Nothing is probed: with ``REDIS_URL`` set and no
    worker consuming, ``/readyz``, ``stats`` and ``/metrics`` say so."""
    if settings.passes_on_redis:
        log.info("REDIS_URL is set: the passes go to `memwarden worker` through Redis")
        return None
    log.info("REDIS_URL is unset: the conflict autopilot and consolidation run inside `memwarden serve`")
    return ServeAutopilot(settings)
