"""How the background passes fare: a value the workers' probe makes and the API reports."""

from __future__ import annotations

import msgspec


class PassesHealth(msgspec.Struct, frozen=True, kw_only=True):
    """Who runs the passes, and whether anyone is consuming them (``/readyz``, ``stats``,
    ``/metrics``). ``consuming`` is false when no worker has sent a heartbeat within the stale
    time, or messages wait and no live worker has consumed one for that long."""

    runner: str
    """``redis`` (``memwarden worker`` processes) or ``in-process`` (``memwarden serve``)."""
    consuming: bool
    workers: int | None = None
    """Workers with a live heartbeat (Redis only)."""
    queued: int | None = None
    """Messages waiting on the deployment's queues (Redis only)."""
    idle_seconds: float | None = None
    """Since the newest consumption by a live worker (or its start, if it consumed none)."""
    detail: str | None = None
    """Why nobody consumes, when nobody does."""
