"""Worker heartbeats, and whether anyone consumes the passes (docs/architecture.md §9).

Each ``memwarden worker`` process keeps one Redis key of its own under the deployment's
prefix, written every few seconds with an expiry of ``worker_stale_seconds``: when it
started, when it last beat and when one of its actors last finished a message. The key
vanishes by itself when the process dies, whatever killed it. ``/readyz``, ``stats`` and
``/metrics`` read the keys: no live key, or messages waiting while no live worker has
consumed one for ``worker_stale_seconds``, means nobody runs the passes, and they say so
instead of reporting ready and fine.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import threading
import time
from typing import Any

import dramatiq
import msgspec
import redis
from dramatiq.brokers.redis import RedisBroker

from memwarden.domain.model.passes import PassesHealth
from memwarden.domain.settings import Settings, deployment_key
from memwarden.workers.actors import QUEUES, redis_broker
from memwarden.workers.dispatcher import Ticker

log = logging.getLogger(__name__)
BEAT_SECONDS = 5.0
"""How often a worker writes its key (at most: a quarter of the stale time)."""
HEALTH_CACHE_SECONDS = 1.0
"""A process reads the keys at most this often, however many probes ask."""
CONNECT_SECONDS = 0.5


def heartbeat_prefix(settings: Settings) -> str:
    return f"{deployment_key(settings)}:workers:"


class Consumption:
    """When this process's actors last finished a message (wall clock), and how many."""

    def __init__(self) -> None:
        self.started_at = time.time()
        self.last_at: float | None = None
        self.count = 0
        self._lock = threading.Lock()

    def mark(self) -> None:
        with self._lock:
            self.last_at = time.time()
            self.count += 1


class ConsumptionMiddleware(dramatiq.Middleware):
    """Marks ``consumption`` whenever an actor of this broker finishes a message, whatever
    its outcome (a retry is a message consumed too: someone is at work)."""

    def __init__(self, consumption: Consumption) -> None:
        self.consumption = consumption

    def after_process_message(self, *_args: Any, **_kwargs: Any) -> None:
        self.consumption.mark()

    def after_skip_message(self, *_args: Any, **_kwargs: Any) -> None:
        self.consumption.mark()


class Beat(msgspec.Struct, frozen=True, kw_only=True):
    """What one worker's key holds."""

    holder: str
    started_at: float
    beat_at: float
    consumed_at: float | None = None
    consumed: int = 0


class Heartbeat(Ticker):
    """Writes this worker's key now and every ``BEAT_SECONDS`` (a quarter of the stale time
    at most), with the stale time as its expiry; deletes it on a clean stop."""

    def __init__(
        self, settings: Settings, client: redis.Redis, holder: str, consumption: Consumption
    ) -> None:
        self.stale = settings.worker_stale_seconds
        super().__init__("heartbeat", min(BEAT_SECONDS, self.stale / 4), self.beat)
        self.client = client
        self.key = heartbeat_prefix(settings) + holder
        self.holder = holder
        self.consumption = consumption

    def beat(self) -> None:
        c = self.consumption
        body = Beat(
            holder=self.holder,
            started_at=c.started_at,
            beat_at=time.time(),
            consumed_at=c.last_at,
            consumed=c.count,
        )
        self.client.set(self.key, msgspec.json.encode(body), ex=max(1, math.ceil(self.stale)))

    def start(self) -> bool:
        try:
            self.beat()  # at once: a worker counts from its first second
        except (redis.RedisError, OSError) as error:
            log.warning("heartbeat: Redis unavailable (%s)", type(error).__name__)
        return super().start()

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(redis.RedisError, OSError):  # else it expires by itself
            self.client.delete(self.key)


IN_PROCESS = PassesHealth(runner="in-process", consuming=True)


@functools.cache
def passes_probe(settings: Settings) -> PassesProbe:
    """The process's probe for one deployment (its Redis client kept between calls)."""
    return PassesProbe(settings)


class PassesProbe:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._broker: RedisBroker | None = None
        self._cached: tuple[float, PassesHealth] | None = None

    def health(self) -> PassesHealth:
        if self.settings.redis_url is None:
            return IN_PROCESS
        with self._lock:
            now = time.monotonic()
            if self._cached is not None and now - self._cached[0] < HEALTH_CACHE_SECONDS:
                return self._cached[1]
            found = self._read()
            self._cached = (now, found)
            return found

    def _read(self) -> PassesHealth:
        stale = self.settings.worker_stale_seconds
        try:
            client, broker = self._redis()
            beats = [_beat(raw) for raw in _values(client, heartbeat_prefix(self.settings))]
            queued = sum(int(broker.do_qsize(queue)) for queue in QUEUES)
        except (redis.RedisError, OSError) as error:
            return PassesHealth(
                runner="redis",
                consuming=False,
                detail=f"Redis (REDIS_URL) does not answer ({type(error).__name__}): no worker is reachable",
            )
        now = time.time()
        live = [b for b in beats if b is not None and now - b.beat_at <= stale]
        if not live:
            return PassesHealth(
                runner="redis",
                consuming=False,
                workers=0,
                queued=queued,
                detail=f"no worker has sent a heartbeat for {stale:g} s: start `memwarden worker`"
                " with this REDIS_URL and DATABASE_URL",
            )
        idle = now - max(b.consumed_at or b.started_at for b in live)
        stalled = queued > 0 and idle > stale
        return PassesHealth(
            runner="redis",
            consuming=not stalled,
            workers=len(live),
            queued=queued,
            idle_seconds=round(max(0.0, idle), 1),
            detail=f"{queued} messages wait and no worker has consumed one for {idle:.0f} s"
            if stalled
            else None,
        )

    def _redis(self) -> tuple[redis.Redis, RedisBroker]:
        if self._client is None or self._broker is None:
            assert self.settings.redis_url is not None
            self._client = redis.Redis.from_url(
                self.settings.redis_url, socket_connect_timeout=CONNECT_SECONDS, socket_timeout=1.0
            )
            self._broker = redis_broker(self.settings, self._client)
        return self._client, self._broker


def _values(client: redis.Redis, prefix: str) -> list[bytes]:
    keys = list(client.scan_iter(match=_escaped(prefix) + "*", count=500))
    if not keys:
        return []
    return [v for v in client.mget(keys) if isinstance(v, bytes)]


def _escaped(prefix: str) -> str:
    """A key prefix as a SCAN pattern matches it literally."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in prefix)


def _beat(raw: bytes) -> Beat | None:
    try:
        return msgspec.json.decode(raw, type=Beat)
    except msgspec.DecodeError:
        return None  # not ours: no worker
