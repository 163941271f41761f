"""``memwarden serve``'s HTTP server: uvicorn running the app of the settings the command line
decided, never by changing this process's environment.

One API process: the app is made here from those settings (uvicorn calls the factory given).
Several: uvicorn's workers are processes it spawns, which learn nothing but their
environment; a supervising child runs them, started with an explicit environment that
holds those settings (``environment``: the variables the command line chose, over ours).
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping

from memwarden.domain.settings import Settings

APP_FACTORY = "memwarden.api.http.app:app_from_env"
PARENT_CHECK_SECONDS = 0.5


def serve_http(
    settings: Settings, environment: Mapping[str, str], *, host: str, port: int, workers: int, log_level: str
) -> int:
    """Serve until stopped; the exit code. ``settings``: this process's app (one worker);
    ``environment``: what several workers read the same settings from."""
    if workers > 1:
        return _supervise(environment, [host, str(port), str(workers), log_level])
    from memwarden.api.http.app import create_app  # noqa: PLC0415 - the app only for the command that serves it

    _run(functools.partial(create_app, settings), host=host, port=port, workers=1, log_level=log_level)
    return 0


def _run(app: object, *, host: str, port: int, workers: int, log_level: str) -> None:
    import uvicorn  # noqa: PLC0415 - only the command that serves needs it

    from memwarden.api.http.protocol import JsonErrorsProtocol  # noqa: PLC0415 - uvicorn's protocols

    uvicorn.run(
        app,  # type: ignore[arg-type]  # a factory (the partial) or its import string
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        http=JsonErrorsProtocol,
    )


def _supervise(environment: Mapping[str, str], arguments: list[str]) -> int:
    """Run ``main`` in a child with ``environment``; stop it (SIGTERM, then wait) when this
    process is stopped."""
    command = [sys.executable, "-m", __name__, *arguments]
    child = subprocess.Popen(command, env=dict(environment))  # noqa: S603 - our module, our flags
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait()


def _stop_with(parent: int) -> None:
    """Stop this process as SIGTERM does (uvicorn stops its workers) once ``parent`` is gone,
    however it ended: a killed ``serve`` leaves no API process serving its port."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    """The supervising child of ``serve --workers N``: uvicorn and its N workers, each
    reading its settings from the environment it was started with."""
    parser = argparse.ArgumentParser()
    for name in ("host", "port", "workers", "log_level"):
        parser.add_argument(name)
    args = parser.parse_args(argv)
    threading.Thread(target=_stop_with, args=(os.getppid(),), name="serve-parent", daemon=True).start()
    _run(
        APP_FACTORY, host=args.host, port=int(args.port), workers=int(args.workers), log_level=args.log_level
    )


if __name__ == "__main__":
    main()
