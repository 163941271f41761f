"""Two `memwarden serve` and two `memwarden worker` processes on one PostgreSQL and one
Redis (docs/architecture.md section 11): a key's rate limit counts its calls on both APIs, a read on
one API finds the key's write on the other at once, the workers' leases fence every pass
(one of them killed midway), and every memory is judged exactly once."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest

from memwarden.domain.model.events import LeaseEvent, LeaseTaken
from memwarden.domain.settings import Settings
from memwarden.workers.actors import redis_broker
from tests.conftest import on_redis
from tests.e2e.fleet import Fleet, client, deployment_env, fleet, judged, ledger_events, limit_tenant
from tests.processes import cli_key, wait_until

pytestmark = pytest.mark.slow

RATE_LIMIT = 6
NAMESPACES = [f"acme/team{n}" for n in range(4)]


@pytest.fixture
def settings(settings: Settings, redis_url: str) -> Settings:
    """This module's deployment sends its passes to workers through the session's Redis."""
    return on_redis(settings, redis_url)


@pytest.fixture
def deployment(settings: Settings, tmp_path: Path) -> Iterator[tuple[Fleet, list[str]]]:
    """Two API processes (each with its projector) and two workers, Redis shared state."""
    broker = redis_broker(settings)
    broker.flush_all()  # this database's queues only (their own key prefix)
    broker.close()
    env = deployment_env(settings)
    limit_tenant(settings, "limited", RATE_LIMIT)
    with fleet(env, tmp_path / "logs") as started:
        bases = [started.serve(f"api{n}") for n in (1, 2)]
        for n in (1, 2):
            started.worker(f"worker{n}")
        yield started, bases


def test_the_rate_limit_counts_calls_on_both_apis(deployment: tuple[Fleet, list[str]]) -> None:
    started, bases = deployment
    key = cli_key(started.env, "limited/eng", "bot", "agent")
    statuses = []
    for n in range(RATE_LIMIT + 2):
        with client(bases[n % 2], key) as session:
            answer = session.post("/v1/mem/stats", json={})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["Retry-After"]) >= 1
    assert statuses == [200] * RATE_LIMIT + [429, 429]


def test_reads_on_one_api_find_the_writes_on_the_other_and_each_memory_is_judged_once(
    deployment: tuple[Fleet, list[str]], settings: Settings
) -> None:
    started, bases = deployment
    keys = {ns: cli_key(started.env, ns, "bot", "agent") for ns in NAMESPACES}
    written: list[UUID] = []

    def write_and_read_elsewhere(n: int) -> None:
        namespace = NAMESPACES[n % len(NAMESPACES)]
        content = f"Build {n} of the billing service in {namespace} took {n % 7 + 2} minutes"
        with (
            client(bases[n % 2], keys[namespace]) as here,
            client(bases[(n + 1) % 2], keys[namespace]) as there,
        ):
            answer = here.post("/v1/mem/write", json={"content": content})
            assert answer.status_code == 200, answer.text
            read = there.post("/v1/mem/read", json={"id": answer.json()["id"]})
            assert read.status_code == 200, read.text  # read-your-writes across processes
            assert read.json()["content"] == content
            written.append(UUID(answer.json()["id"]))

    for n in range(16):
        write_and_read_elsewhere(n)
    wait_until(lambda: bool(_holders(ledger_events(settings))), 120)
    pids = {started.processes[name].pid: name for name in ("worker1", "worker2")}
    busy = next(pids[p] for p in _holder_pids(ledger_events(settings)) if p in pids)
    spare = "worker2" if busy == "worker1" else "worker1"
    started.kill(busy)  # a worker at work dies: the other takes its leases over once they expire
    for n in range(16, 32):
        write_and_read_elsewhere(n)
    wait_until(lambda: set(written) <= set(judged(settings)), 180)
    assert started.processes[spare].poll() is None, started.log(spare)
    assert started.processes[spare].pid in _holder_pids(ledger_events(settings))

    counts = judged(settings)
    assert all(counts[m] == 1 for m in written), counts
    _assert_leases_fenced(ledger_events(settings))
    log = started.logs_text()
    assert "Traceback" not in log, log[-6000:]


def _holders(events: list[object]) -> set[str]:
    return {e.holder for e in events if isinstance(e, LeaseEvent)}


def _holder_pids(events: list[object]) -> set[int]:
    """The processes that held leases (a holder is ``host:pid:nonce``, workers/actors.py)."""
    return {int(holder.split(":")[1]) for holder in _holders(events)}


def _assert_leases_fenced(events: list[object]) -> None:
    """On every lease stream, each take has a higher token than the one before it."""
    tokens: dict[UUID, list[int]] = defaultdict(list)
    for event in events:
        if isinstance(event, LeaseTaken):
            tokens[event.lease_id].append(event.token)
    assert tokens, "no pass took a lease"
    for lease, taken in tokens.items():
        assert taken == sorted(set(taken)), (lease, taken)
