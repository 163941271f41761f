"""Limits and positions per key: token buckets and each key's last write, in one API
process (``ProcessCallerState``) or shared by several through Redis (``RedisCallerState``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis
import redis.asyncio

from memwarden.api.http.metrics import Metrics

log = logging.getLogger(__name__)


class TokenBuckets:
    """A token bucket per key: ``per_minute`` tokens a minute, bursts up to ``per_minute``.

    ``take`` spends a token only when one is there (rate limits). ``spend`` spends one even
    past empty, into debt that must refill before the next token: failures counted past the
    limit lengthen the wait (the authentication throttle). Both are the one bucket."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, per_minute: int, now: float | None = None) -> float:
        """0.0 when a token was taken, else the seconds until one is available."""
        now = time.monotonic() if now is None else now
        with self._lock:
            wait = self._wait(key, per_minute, now)
            if wait == 0.0:
                self._spend(key, per_minute, now)
            return wait

    def wait(self, key: str, per_minute: int, now: float | None = None) -> float:
        """Seconds until the key has a token; 0.0 when it has one now. Spends nothing."""
        now = time.monotonic() if now is None else now
        with self._lock:
            return self._wait(key, per_minute, now)

    def spend(self, key: str, per_minute: int, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._spend(key, per_minute, now)

    def __len__(self) -> int:
        return len(self._buckets)

    def forget(self, keep: Callable[[str, bool], bool], per_minute: Callable[[str], int], now: float) -> None:
        """Drop the buckets ``keep(key, full)`` refuses; a full bucket is as good as none."""
        with self._lock:
            self._buckets = {
                key: bucket
                for key, bucket in self._buckets.items()
                if keep(key, self._tokens(key, per_minute(key), now) >= per_minute(key))
            }

    def _tokens(self, key: str, per_minute: int, now: float) -> float:
        capacity = float(per_minute)
        tokens, last = self._buckets.get(key, (capacity, now))
        return min(capacity, tokens + max(0.0, now - last) * per_minute / 60.0)

    def _wait(self, key: str, per_minute: int, now: float) -> float:
        tokens = self._tokens(key, per_minute, now)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) * 60.0 / per_minute

    def _spend(self, key: str, per_minute: int, now: float) -> None:
        self._buckets[key] = (self._tokens(key, per_minute, now) - 1.0, now)


MAX_KEYS_REMEMBERED = 100_000


class LastWrites:
    """Each key's last write position in this process (read-your-writes)."""

    def __init__(self) -> None:
        self._positions: dict[str, int] = {}
        self._lock = threading.Lock()

    def get(self, key_id: str) -> int | None:
        return self._positions.get(key_id)

    def note(self, key_id: str, position: int) -> None:
        with self._lock:
            if len(self._positions) > MAX_KEYS_REMEMBERED:
                self._forget_oldest()
            if position > self._positions.get(key_id, 0):
                self._positions[key_id] = position

    def _forget_oldest(self) -> None:
        """Keep the newer half: the oldest writes are the ones the read models have long passed."""
        newest = sorted(self._positions.items(), key=lambda item: item[1])[len(self._positions) // 2 :]
        self._positions = dict(newest)


# -- what every API process must agree on: each key's bucket and last write ---------------------

HEAD = -1
"""A last write that cannot be known (the shared store is down): wait for the ledger head."""


class CallerState(Protocol):
    """Each key's rate-limit bucket and last write position, as every API process of a
    deployment sees them."""

    async def admit(self, key_id: str, per_minute: int) -> tuple[float, int | None]:
        """Take a token: (0.0, or the seconds until one is available; the key's last write
        position, None if it never wrote, ``HEAD`` if that cannot be known)."""
        ...

    def note_write(self, key_id: str, position: int) -> None: ...

    async def close(self) -> None: ...


class ProcessCallerState:
    """One API process: buckets and last writes in memory, no I/O."""

    def __init__(self) -> None:
        self.buckets = TokenBuckets()
        self.last_writes = LastWrites()

    async def admit(self, key_id: str, per_minute: int) -> tuple[float, int | None]:
        return self.buckets.take(key_id, per_minute), self.last_writes.get(key_id)

    def note_write(self, key_id: str, position: int) -> None:
        self.last_writes.note(key_id, position)

    async def close(self) -> None:
        return None


# KEYS: bucket, last write; ARGV: capacity (= per minute). The server's clock, so API
# processes on several machines share one time line.
_ADMIT = """
local capacity = tonumber(ARGV[1])
local refill = capacity / 60.0
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or capacity
local at = tonumber(bucket[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - at) * refill)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / refill end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(60 + 1 / refill))
return {tostring(wait), redis.call('GET', KEYS[2]) or false}
"""
# KEYS: last write; ARGV: position, seconds to keep it. Never moves a position back.
_NOTE = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > current then redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2]) end
return 0
"""
LAST_WRITE_SECONDS = 3600
"""How long a key's last write is kept: far past any wait a read would still make for it."""
RETRY_SECONDS = 5.0
"""After a failure, how long the shared store is left alone (each request would otherwise
wait for its timeout)."""


class RedisCallerState:
    """Several API processes (``serve --workers N``, several machines): buckets and last
    writes in Redis, one round trip a syscall (one more after a write).

    Redis down degrades, never permits: the bucket falls back to this process's own (the
    limit still holds per process), and a read, not knowing the caller's last write, waits
    for the ledger head — slower, never stale. Writes never depend on Redis."""

    def __init__(self, url: str, prefix: str, metrics: Metrics) -> None:
        self._prefix = prefix
        self._metrics = metrics
        options: dict[str, Any] = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}
        self._async = redis.asyncio.Redis.from_url(url, **options)
        self._sync = redis.Redis.from_url(url, **options)
        self._admit = self._async.register_script(_ADMIT)
        self._note = self._sync.register_script(_NOTE)
        self._fallback = ProcessCallerState()
        self._down_until = 0.0

    def _keys(self, key_id: str) -> tuple[str, str]:
        return f"{self._prefix}:bucket:{key_id}", f"{self._prefix}:last_write:{key_id}"

    async def admit(self, key_id: str, per_minute: int) -> tuple[float, int | None]:
        if time.monotonic() >= self._down_until:
            try:
                wait, last = await self._admit(keys=self._keys(key_id), args=[per_minute])
                return float(wait), int(last) if last is not None else None
            except (redis.RedisError, OSError, ValueError):
                self._failed()
        wait, _ = await self._fallback.admit(key_id, per_minute)
        return wait, HEAD

    def note_write(self, key_id: str, position: int) -> None:
        self._fallback.note_write(key_id, position)
        if time.monotonic() >= self._down_until:
            try:
                self._note(keys=self._keys(key_id)[1:], args=[position, LAST_WRITE_SECONDS])
            except (redis.RedisError, OSError):
                self._failed()

    def _failed(self) -> None:
        self._down_until = time.monotonic() + RETRY_SECONDS
        self._metrics.count("shared_state_unavailable")
        log.warning("Redis is unavailable: rate limits per process, reads wait for the ledger head")

    async def close(self) -> None:
        await self._async.aclose()
        self._sync.close()
