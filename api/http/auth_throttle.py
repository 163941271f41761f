"""Failed authentication is throttled per source address and per key id: a caller guessing
keys (or a stolen key id with guessed secrets) gets 429 with ``Retry-After`` once it has failed
too often, before its next guess is even checked. Successful calls never spend the budget."""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from typing import NamedTuple

from memwarden.api.http.limits import TokenBuckets
from memwarden.domain.model.keys import parse_key

FAILURES_PER_MINUTE_PER_SOURCE = 30
FAILURES_PER_MINUTE_PER_KEY = 10
MAX_REMEMBERED = 100_000


class AuthThrottle:
    """A token bucket per source and per key id, spent by each failure: an empty bucket
    refuses until it has refilled a token; failures past empty deepen the wait. One per API
    process."""

    def __init__(
        self,
        per_source: int = FAILURES_PER_MINUTE_PER_SOURCE,
        per_key: int = FAILURES_PER_MINUTE_PER_KEY,
    ) -> None:
        self._limits = {"source": per_source, "key": per_key}
        self._buckets = TokenBuckets()
        self._lock = threading.Lock()  # a failure spends both of its buckets at once

    def retry_after(self, source: str, key_id: str | None, now: float | None = None) -> int:
        """Seconds until this source (and this key id) may try again; 0 when it may now."""
        now = time.monotonic() if now is None else now
        with self._lock:
            wait = max(self._buckets.wait(b, self._limit(b), now) for b in self._names(source, key_id))
        return math.ceil(wait) if wait > 0 else 0

    def failed(self, source: str, key_id: str | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            if len(self._buckets) > MAX_REMEMBERED:
                self._forget(now)
            for bucket in self._names(source, key_id):
                self._buckets.spend(bucket, self._limit(bucket), now)

    def attempt(self, client_host: str | None, presented: str) -> Attempt:
        """One presentation of a credential (``presented``, maybe empty) from a client: the
        key id it names (when it parses as a key) and its source, to check and spend."""
        parsed = parse_key(presented) if presented else None
        return Attempt(self, client_host or "unknown", parsed)

    def _forget(self, now: float) -> None:
        """Bound memory without handing the attacker a reset: full buckets go first, then
        source buckets (a flood of fresh addresses is itself cheap); key buckets stay, so a
        key id under attack keeps its throttle however many addresses the guesser uses."""
        self._buckets.forget(lambda _, full: not full, self._limit, now)
        if len(self._buckets) > MAX_REMEMBERED:
            self._buckets.forget(lambda name, _: not name.startswith("source:"), self._limit, now)
        if len(self._buckets) > MAX_REMEMBERED:  # only invented key ids remain: forget them
            self._buckets.forget(lambda _, __: False, self._limit, now)

    @staticmethod
    def _names(source: str, key_id: str | None) -> list[str]:
        return [f"source:{source_block(source)}"] + ([f"key:{key_id}"] if key_id else [])

    def _limit(self, bucket: str) -> int:
        return self._limits[bucket.partition(":")[0]]


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


class Attempt(NamedTuple):
    """A credential presented from ``source``: ``parsed`` is its (key id, secret) when it
    parses as a key. Every authenticating entry point (the API's gate, the console's login,
    the metrics scrape) checks ``retry_after`` before the credential and calls ``failed``
    after a wrong one, so all of them spend the same buckets."""

    throttle: AuthThrottle
    source: str
    parsed: tuple[str, str] | None

    @property
    def key_id(self) -> str | None:
        return self.parsed[0] if self.parsed else None

    def retry_after(self) -> int:
        return self.throttle.retry_after(self.source, self.key_id)

    def failed(self) -> None:
        self.throttle.failed(self.source, self.key_id)
