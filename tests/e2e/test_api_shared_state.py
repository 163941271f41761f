"""Two API processes of one deployment (two apps, two runtimes, one database): with the
shared state in Redis, a key's reads on one see its write on the other, and its rate limit
counts calls on both."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack

import msgspec
import pytest
from litestar.testing import TestClient

from memwarden.api.http.app import create_app
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from tests.conftest import on_redis
from tests.e2e.api_helpers import Api


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


def _processes(settings: Settings, shared_state: str) -> Iterator[tuple[Api, Api]]:
    """Nothing projects in the background: a read finds a write only if it waits for it."""
    shared = msgspec.structs.replace(settings, shared_state=shared_state)
    with ExitStack() as stack:
        apis = []
        for _ in range(2):
            runtime = stack.enter_context(Runtime(shared, follow=False))
            client = stack.enter_context(TestClient(app=create_app(shared, runtime)))
            apis.append(Api(runtime, client))
        yield apis[0], apis[1]


@pytest.fixture
def shared(settings: Settings) -> Iterator[tuple[Api, Api]]:
    yield from _processes(settings, "redis")


@pytest.fixture
def separate(settings: Settings) -> Iterator[tuple[Api, Api]]:
    yield from _processes(settings, "process")


def _write_then_read_elsewhere(first: Api, second: Api) -> int:
    key = first.key("acme/eng", "bot", "agent")
    written = first.mem(key, "write", {"content": "The build cache lives on the arm64 runners"})
    assert written.status_code == 200, written.text
    read = second.mem(key, "read", {"id": written.json()["id"]})
    return int(read.status_code)


def test_a_read_on_another_process_finds_the_keys_own_write(shared: tuple[Api, Api]) -> None:
    assert _write_then_read_elsewhere(*shared) == 200


def test_without_the_shared_state_that_read_would_miss(separate: tuple[Api, Api]) -> None:
    """The control: the same steps fail when each process knows only its own writes."""
    assert _write_then_read_elsewhere(*separate) == 404


def test_the_rate_limit_counts_calls_on_every_process(shared: tuple[Api, Api]) -> None:
    first, second = shared
    operator = Identity("acme", "operator@test", "owner")
    first.runtime.core.governance.set_policy(operator, "acme", PolicyBody(rate_limit_per_minute=4))
    key = first.key("acme/eng", "bot", "agent")
    statuses = [api.mem(key, "stats").status_code for api in (first, second, first, second)]
    assert statuses == [200, 200, 200, 200]
    refused = second.mem(key, "stats")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert first.mem(key, "stats").status_code == 429
