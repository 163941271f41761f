"""Where a search's time goes, stage by stage, for the one who asks (``memwarden bench
search --profile``): off by default, one context variable read per stage when off."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_recording: ContextVar[dict[str, float] | None] = ContextVar("search_stages", default=None)


@contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Seconds spent in each stage by the searches run in this block, in this thread."""
    stages: dict[str, float] = {}
    token = _recording.set(stages)
    try:
        yield stages
    finally:
        _recording.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Adds the block's wall time to ``name`` when a ``recording`` is open, else nothing."""
    stages = _recording.get()
    if stages is None:
        yield
        return
    began = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - began
