"""Failed authentication is throttled per source address and per key id: a caller guessing
keys (or a stolen key id with guessed secrets) gets 429 with ``Retry-After`` once it has failed
too often, before its next guess is even checked. Successful calls never spend the budget."""

from __future__ import annotations

import ipaddress
import math
import threading
import time

FAILURES_PER_MINUTE_PER_SOURCE = 30
FAILURES_PER_MINUTE_PER_KEY = 10
MAX_REMEMBERED = 100_000


class AuthThrottle:
    """Leaky buckets of failures: each failure fills its source's and its key id's bucket by
    one; a full bucket refuses until it has drained below full. One per API process."""

    def __init__(
        self,
        per_source: int = FAILURES_PER_MINUTE_PER_SOURCE,
        per_key: int = FAILURES_PER_MINUTE_PER_KEY,
    ) -> None:
        self._limits = {"source": per_source, "key": per_key}
        self._levels: dict[tuple[str, str], tuple[float, float]] = {}
        self._lock = threading.Lock()

    def retry_after(self, source: str, key_id: str | None, now: float | None = None) -> int:
        """Seconds until this source (and this key id) may try again; 0 when it may now."""
        now = time.monotonic() if now is None else now
        with self._lock:
            waits = [self._wait(bucket, now) for bucket in self._buckets(source, key_id)]
        wait = max(waits, default=0.0)
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, source: str, key_id: str | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if len(self._levels) > MAX_REMEMBERED:
                self._forget_sources(now)
            for bucket in self._buckets(source, key_id):
                self._levels[bucket] = (self._level(bucket, now) + 1.0, now)

    def _forget_sources(self, now: float) -> None:
        """Bound memory without handing the attacker a reset: drained buckets go first, then
        source buckets (a flood of fresh addresses is itself cheap); key buckets stay, so a
        key id under attack keeps its throttle however many addresses the guesser uses."""
        for bucket in [b for b in self._levels if self._level(b, now) <= 0.0]:
            del self._levels[bucket]
        if len(self._levels) > MAX_REMEMBERED:
            for bucket in [b for b in self._levels if b[0] == "source"]:
                del self._levels[bucket]
        if len(self._levels) > MAX_REMEMBERED:
            self._levels.clear()  # only invented key ids remain: forget rather than grow

    def _buckets(self, source: str, key_id: str | None) -> list[tuple[str, str]]:
        return [("source", source_block(source))] + ([("key", key_id)] if key_id else [])

    def _level(self, bucket: tuple[str, str], now: float) -> float:
        level, at = self._levels.get(bucket, (0.0, now))
        drained = (now - at) * self._limits[bucket[0]] / 60.0
        return max(0.0, level - drained)

    def _wait(self, bucket: tuple[str, str], now: float) -> float:
        limit = self._limits[bucket[0]]
        excess = self._level(bucket, now) - (limit - 1)
        return excess * 60.0 / limit if excess > 0 else 0.0


def source_block(source: str) -> str:
    """The unit a source is throttled by: one IPv4 address, or an IPv6 /64 (the block a single
    host or subscriber is handed, so rotating addresses inside it are one source)."""
    try:
        address = ipaddress.ip_address(source)
    except ValueError:
        return source
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address.ipv4_mapped or address) if isinstance(address, ipaddress.IPv6Address) else str(address)
