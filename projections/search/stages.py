"""Where a search's time goes, stage by stage, for the one who asks (``memwarden bench
search --profile``): off by default, one context variable read per stage when off."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar

_METRIC = re.compile(r",\s*(?=s\d+;)")
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


def add(name: str, seconds: float) -> None:
    """Adds ``seconds`` spent elsewhere (another thread's work this search waited on) to
    ``name`` when a ``recording`` is open, else nothing."""
    stages = _recording.get()
    if stages is not None:
        stages[name] = stages.get(name, 0.0) + seconds


def server_timing(stages: Mapping[str, float]) -> str:
    """The stages as a ``Server-Timing`` header value (W3C): ``s0;desc="rerank";dur=12.3``."""
    return ", ".join(
        f's{n};desc="{name.replace(chr(34), chr(39))}";dur={seconds * 1000:.3f}'
        for n, (name, seconds) in enumerate(stages.items())
    )


@contextmanager
def timed_stages(enabled: bool) -> Iterator[dict[str, str]]:
    """With ``enabled`` (``MEMWARDEN_SERVER_TIMING``), the block's stages and its whole time
    (``handler``) as a ``Server-Timing`` header, filled in when the block ends."""
    headers: dict[str, str] = {}
    if not enabled:
        yield headers
        return
    with recording() as stages:
        began = time.perf_counter()
        yield headers
        stages["handler"] = time.perf_counter() - began
    headers["Server-Timing"] = server_timing(stages)


def parse_server_timing(value: str) -> dict[str, float]:
    """``server_timing``'s value back into stage names and seconds."""
    stages: dict[str, float] = {}
    for metric in filter(None, (m.strip() for m in _METRIC.split(value))):
        fields = dict(part.partition("=")[::2] for part in metric.split(";")[1:])
        stages[fields["desc"].strip('"')] = float(fields["dur"]) / 1000
    return stages
