"""In-process limits and positions: token buckets per key, each key's last write."""

from __future__ import annotations

import threading
import time


class TokenBuckets:
    """A token bucket per key: ``rate`` per minute, bursts up to ``rate``."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, per_minute: int, now: float | None = None) -> float:
        """0.0 when a token was taken, else the seconds until one is available."""
        now = time.monotonic() if now is None else now
        capacity, refill = float(per_minute), per_minute / 60.0
        with self._lock:
            tokens, last = self._buckets.get(key, (capacity, now))
            tokens = min(capacity, tokens + (now - last) * refill)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return 0.0
            self._buckets[key] = (tokens, now)
            return (1.0 - tokens) / refill


class LastWrites:
    """Each key's last write position in this process (read-your-writes)."""

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str) -> int | None:
        return self._positions.get(key_id)

    def note(self, key_id: str, position: int) -> None:
        with self._lock:
            if len(self._positions) > 100_000:
                self._positions.clear()
            if position > self._positions.get(key_id, 0):
                self._positions[key_id] = position
