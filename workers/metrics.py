"""Queue depth for ``/metrics``: the messages on the deployment's Dramatiq queues in Redis,
the passes' and the async write tickets' (waiting, delayed for a retry, or taken by a
worker and not yet done), or, when the passes
run inside ``memwarden serve`` for want of a Redis, what its dispatchers hold unsent."""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import redis
from dramatiq.brokers.redis import RedisBroker

from memwarden.domain.settings import Settings
from memwarden.workers.actors import AUTOPILOT_QUEUE, MAINTENANCE_QUEUE, TICKETS_QUEUE, redis_broker
from memwarden.workers.dispatcher import Dispatcher

CONNECT_SECONDS = 0.5
"""A scrape waits at most this long for a Redis that does not answer."""

_in_process: weakref.WeakSet[Dispatcher[Any]] = weakref.WeakSet()


def count_in_process(dispatcher: Dispatcher[Any]) -> None:
    """Report ``dispatcher``'s unsent triggers as this process's queue (``serve`` without
    Redis), until ``uncount``."""
    _in_process.add(dispatcher)


def uncount(dispatcher: Dispatcher[Any]) -> None:
    _in_process.discard(dispatcher)


@functools.cache
def queue_depth(settings: Settings) -> QueueDepth:
    """The process's gauge for one deployment (its broker kept between scrapes)."""
    return QueueDepth(settings)


class QueueDepth:
    """One scrape's queue gauge: ``(labels, depth)`` rows; none when no queue answers."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._broker: RedisBroker | None = None
        self._lock = threading.Lock()

    def rows(self) -> list[tuple[tuple[tuple[str, str], ...], float]]:
        local = sorted(_in_process, key=lambda d: d.name)
        if local:
            return [((("queue", d.name), ("broker", "in-process")), float(d.backlog)) for d in local]
        if self.settings.redis_url is None:  # the passes run in `memwarden serve`: no queue
            return []
        try:
            broker = self._redis()
            depths = [
                (queue, broker.do_qsize(queue))
                for queue in (AUTOPILOT_QUEUE, MAINTENANCE_QUEUE, TICKETS_QUEUE)
            ]
        except (redis.RedisError, OSError):  # no Redis: no queue to count
            return []
        return [((("queue", queue), ("broker", "redis")), float(depth)) for queue, depth in depths]

    def _redis(self) -> RedisBroker:
        with self._lock:
            if self._broker is None:
                assert self.settings.redis_url is not None
                client = redis.Redis.from_url(
                    self.settings.redis_url, socket_connect_timeout=CONNECT_SECONDS, socket_timeout=1.0
                )
                self._broker = redis_broker(self.settings, client)
            return self._broker
