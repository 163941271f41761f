"""A small in-process cache whose entries expire a fixed time after they were stored."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """Entries live ``seconds``; past ``max_items`` the cache starts over (no eviction order
    to keep: every entry is short-lived anyway)."""

    def __init__(self, seconds: float, max_items: int = 50_000) -> None:
        self.seconds = seconds
        self.max_items = max_items
        self._items: dict[K, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        item = self._items.get(key)
        if item is None or item[0] < time.monotonic():
            return None
        return item[1]

    def put(self, key: K, value: V) -> None:
        with self._lock:
            if len(self._items) > self.max_items:
                self._items.clear()
            self._items[key] = (time.monotonic() + self.seconds, value)

    def drop(self, key: K) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
