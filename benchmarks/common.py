"""Shared pieces of the benchmarks: a scratch database, timing loops, percentiles."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import psycopg
from psycopg import sql

from memwarden.bootstrap.migrate import migrate
from memwarden.domain.embedding import Embedder, embedder_from_settings
from memwarden.domain.embedding.base import EmbedderWrapper
from memwarden.domain.ledger.database import ConnectionParams, EmbeddedServer, resolve_database
from memwarden.domain.settings import Settings, environment_with


class RunStats(msgspec.Struct, frozen=True, kw_only=True):
    label: str
    threads: int
    operations: int
    seconds: float
    per_second: float
    p50_ms: float
    p95_ms: float


def bare(embedder: Embedder) -> Embedder:
    """The model itself: no cache (that would answer repeats for free), no batcher."""
    while isinstance(embedder, EmbedderWrapper):
        embedder = embedder.inner
    return embedder


def configured_model(bench: str, settings: Settings) -> Embedder:
    """The model ``settings.embedder`` names (``MEMWARDEN_EMBEDDER``, default MiniLM), bare; a
    bench that measures vectors needs one, so ``none`` stops it with a clear message."""
    configured = embedder_from_settings(settings)
    if configured is None:
        raise SystemExit(f"bench {bench} needs an embedder (MEMWARDEN_EMBEDDER=minilm or bge), not none")
    return bare(configured)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@contextlib.contextmanager
def scratch_database(name: str) -> Iterator[tuple[Settings, ConnectionParams]]:
    """A fresh database on the configured server (or the embedded default), migrated,
    dropped after."""
    base = Settings.from_env()
    params, server = resolve_database(base)
    server_for_bench: EmbeddedServer | None = server
    with psycopg.connect(params.with_dbname("postgres").conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    target = params.with_dbname(name)
    migrate(target)
    url = f"postgresql://{target.user}:{target.password}@/{name}?host={target.host}&port={target.port}"
    settings = msgspec.structs.replace(base, database_url=url, data_dir=Path(base.data_dir))
    try:
        yield settings, target
    finally:
        with psycopg.connect(params.with_dbname("postgres").conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if server_for_bench is not None:
            server_for_bench.stop()


def run_threads(
    label: str, threads: int, seconds: float, make_worker: Callable[[int], Callable[[int], object]]
) -> RunStats:
    """Run ``threads`` workers for ``seconds``; each call of a worker is one timed operation."""
    return summarize(label, threads, *timed_threads(threads, seconds, make_worker))


def timed_threads(
    threads: int, seconds: float, make_worker: Callable[[int], Callable[[int], object]]
) -> tuple[list[float], float]:
    """The latencies (seconds) of every operation of ``threads`` workers run for ``seconds``,
    and the time it took."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    workers = [make_worker(i) for i in range(threads)]
    start_barrier = threading.Barrier(threads + 1)
    deadline = [0.0]

    def loop(index: int) -> None:
        work, mine = workers[index], latencies[index]
        start_barrier.wait()
        n = 0
        while time.perf_counter() < deadline[0]:
            began = time.perf_counter()
            work(n)
            mine.append(time.perf_counter() - began)
            n += 1

    pool = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    began = time.perf_counter()
    deadline[0] = began + seconds
    start_barrier.wait()
    for t in pool:
        t.join()
    return [x for per in latencies for x in per], time.perf_counter() - began


def summarize(label: str, threads: int, latencies: list[float], elapsed: float) -> RunStats:
    return RunStats(
        label=label,
        threads=threads,
        operations=len(latencies),
        seconds=round(elapsed, 3),
        per_second=round(len(latencies) / elapsed, 1) if elapsed > 0 else 0.0,
        p50_ms=round(percentile(latencies, 0.50) * 1000, 3),
        p95_ms=round(percentile(latencies, 0.95) * 1000, 3),
    )


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def deployment_env(settings: Settings, **chosen: str) -> dict[str, str]:
    """The environment of a process a bench starts on its deployment (``settings``'s database
    and data directory), with ``chosen`` variables over this process's own."""
    return environment_with(
        {"DATABASE_URL": settings.database_url or "", "MEMWARDEN_DATA_DIR": str(settings.data_dir), **chosen}
    )
