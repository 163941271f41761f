"""Cryptographic randomness, buffered per thread.

Every write needs a memory id, an audit id, a data key and nonces. Each ``os.urandom``
call is a system call that drops the GIL, and with many writer threads re-acquiring it
costs far more than the randomness itself. Reading 4 KiB at a time from the same source
(and never reusing a byte) keeps the quality and removes almost all of those calls.
"""

from __future__ import annotations

import os
import threading
from uuid import UUID

CHUNK = 4096


class _Buffer(threading.local):
    def __init__(self) -> None:
        self.data = b""
        self.offset = 0


_local = _Buffer()


def random_bytes(count: int) -> bytes:
    if count > CHUNK:
        return os.urandom(count)
    buffer = _local
    if buffer.offset + count > len(buffer.data):
        buffer.data = os.urandom(CHUNK)
        buffer.offset = 0
    start = buffer.offset
    buffer.offset = start + count
    return buffer.data[start : start + count]


def new_uuid() -> UUID:
    """A random (version 4) UUID."""
    return UUID(bytes=random_bytes(16), version=4)


def reseed_after_fork() -> None:
    """A forked child must not reuse bytes its parent buffered."""
    _local.data = b""
    _local.offset = 0


os.register_at_fork(after_in_child=reseed_after_fork)
