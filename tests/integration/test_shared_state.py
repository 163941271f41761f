"""Each key's bucket and last write, shared by API processes through a real Redis, and
what happens when Redis is down (per-process limits, reads wait for the ledger head)."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest
import redis

from memwarden.api.http.limits import HEAD, LastWrites, ProcessCallerState, RedisCallerState
from memwarden.api.http.metrics import Metrics
from tests.processes import free_port


def _closed_port_url() -> str:
    port = free_port()
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def prefix(redis_url: str) -> str:
    redis.Redis.from_url(
        redis_url
    ).ping()  # the tests need the real Redis (the session's own), never a stand-in
    return f"memwarden-test:{uuid4().hex}"


def test_two_processes_share_one_bucket_per_key(prefix: str, redis_url: str) -> None:
    async def run() -> None:
        first, second = (RedisCallerState(redis_url, prefix, Metrics()) for _ in range(2))
        key = uuid4().hex
        waits = [(await state.admit(key, 3))[0] for state in (first, second, first)]
        assert waits == [0.0, 0.0, 0.0]
        refused, _ = await second.admit(key, 3)
        assert 0.0 < refused <= 20.0  # 3 a minute: a token every 20 s
        assert (await first.admit(uuid4().hex, 3))[0] == 0.0  # another key has its own bucket
        await first.close()
        await second.close()

    asyncio.run(run())


def test_a_write_noted_by_one_process_is_what_another_waits_for(prefix: str, redis_url: str) -> None:
    async def run() -> None:
        writer, reader = (RedisCallerState(redis_url, prefix, Metrics()) for _ in range(2))
        key = uuid4().hex
        assert (await reader.admit(key, 100))[1] is None  # never wrote: nothing to wait for
        writer.note_write(key, 41)
        writer.note_write(key, 40)  # a slower request finishing later never moves it back
        assert (await reader.admit(key, 100))[1] == 41
        await writer.close()
        await reader.close()

    asyncio.run(run())


def test_redis_down_keeps_a_limit_per_process_and_reads_wait_for_the_head() -> None:
    async def run() -> None:
        metrics = Metrics()
        state = RedisCallerState(_closed_port_url(), "memwarden-test:down", metrics)
        key = uuid4().hex
        state.note_write(key, 7)  # a write never fails because Redis does
        assert await state.admit(key, 2) == (0.0, HEAD)
        assert await state.admit(key, 2) == (0.0, HEAD)
        wait, _ = await state.admit(key, 2)
        assert wait > 0.0  # the limit still holds, in this process
        assert metrics.counters["shared_state_unavailable"] >= 1
        await state.close()

    asyncio.run(run())


def test_one_process_keeps_its_state_in_memory() -> None:
    async def run() -> None:
        state = ProcessCallerState()
        key = uuid4().hex
        assert await state.admit(key, 1) == (0.0, None)
        state.note_write(key, 5)
        wait, last = await state.admit(key, 1)
        assert wait > 0.0
        assert last == 5

    asyncio.run(run())


def test_a_full_memory_of_last_writes_forgets_the_oldest_not_the_newest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("memwarden.api.http.limits.MAX_KEYS_REMEMBERED", 4)
    writes = LastWrites()
    for position in range(1, 6):
        writes.note(f"key{position}", position)
    writes.note("key6", 6)
    assert writes.get("key6") == 6
    assert writes.get("key5") == 5
    assert writes.get("key1") is None
