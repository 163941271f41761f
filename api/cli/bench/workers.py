"""``memwarden bench workers``: the conflict autopilot under `memwarden worker` processes.

For 1 and 2 worker processes, each on a scratch database of the configured server:

- **drain**: a backlog of memories written while no worker runs, spread over N namespaces,
  then the workers start; memories judged per second from the first judgement to the last;
- **steady**: writes at a fixed rate while the workers run; the lag of each memory from its
  commit (``recorded_at``) to its judgement (the ``ConflictsJudged`` event's time), p50/p95.

Every memory must be judged exactly once (checked on the ledger). The reference, in the
same run: the nearest-neighbour query alone (the pass's read), per second, in-process.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from uuid import UUID

import msgspec

from api.cli.bench.common import percentile, scratch_database
from bootstrap.runtime import Runtime
from domain.model.autopilot import MIN_COSINE, NEIGHBOURS_K
from domain.model.commands import WriteMemory
from domain.model.events import ConflictsJudged, MemoryWritten
from domain.model.identity import Identity
from domain.settings import Settings
from projections.search.neighbours import SearchNeighbours
from workers.actors import redis_broker

ROOT = Path(__file__).resolve().parents[3]
TARGET_LAG_P95_S = 2.0
TARGET_SCALING = 1.4


class WorkerRun(msgspec.Struct, frozen=True, kw_only=True):
    processes: int
    backlog: int
    judged_per_second: float
    steady_writes: int
    writes_per_second: float
    lag_p50_s: float
    lag_p95_s: float
    judged_twice: int
    unjudged: int


class WorkersReport(msgspec.Struct, frozen=True, kw_only=True):
    namespaces: int
    runs: list[WorkerRun]
    neighbours_per_second: float
    scaling: float | None


def _content(n: int) -> str:
    hour = 8 + n % 10
    return f"The sync of service {n} runs at {hour}:00 on day {n % 28 + 1}"


def _identity(n: int, namespaces: int) -> Identity:
    return Identity(namespace=f"bench/team{n % namespaces}", actor="bench", role="agent")


def _start_workers(settings: Settings, count: int) -> list[subprocess.Popen[str]]:
    env = {
        **os.environ,
        "DATABASE_URL": settings.database_url or "",
        "MEMWARDEN_DATA_DIR": str(settings.data_dir),
        "PYTHONPATH": str(ROOT),
    }
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "api.cli.main", "worker", "--threads", "2"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    for process in processes:
        assert process.stdout is not None
        process.stdout.readline()  # "memwarden worker: running"
    return processes


def _stop(processes: list[subprocess.Popen[str]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        process.wait(60)


def _judgements(rt: Runtime) -> tuple[dict[UUID, datetime], dict[UUID, datetime], Counter[UUID]]:
    written: dict[UUID, datetime] = {}
    judged: dict[UUID, datetime] = {}
    counts: Counter[UUID] = Counter()
    after = 0
    while batch := rt.ledger.read(after, 5000):
        for r in batch:
            if isinstance(r.event, MemoryWritten):
                written[r.event.memory_id] = r.event.at
            elif isinstance(r.event, ConflictsJudged) and r.event.outcome == "judged":
                judged.setdefault(r.event.memory_id, r.event.at)
                counts[r.event.memory_id] += 1
        after = int(batch[-1].position or after)
    return written, judged, counts


def _wait_judged(rt: Runtime, ids: list[UUID], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if set(ids) <= set(_judgements(rt)[1]):
            return
        time.sleep(0.5)


def _run(processes: int, args: argparse.Namespace) -> tuple[WorkerRun, float]:
    with (
        scratch_database(f"memwarden_bench_workers_{processes}") as (scratch, _params),
        Runtime(scratch) as rt,
    ):
        broker = redis_broker(scratch)
        broker.flush_all()  # what an interrupted run on a database of this name left queued
        broker.close()
        backlog = [
            rt.memory.write(_identity(n, args.namespaces), WriteMemory(content=_content(n))).id
            for n in range(args.backlog)
        ]
        neighbours = SearchNeighbours(rt.reads.search, rt.reads.wait_for)
        rt.reads.wait_for(rt.ledger.head_position())
        began = time.perf_counter()
        for memory_id in backlog:
            assert memory_id is not None
            neighbours.nearest(memory_id, NEIGHBOURS_K, MIN_COSINE, 0)
        neighbours_per_second = len(backlog) / (time.perf_counter() - began)
        workers = _start_workers(scratch, processes)
        try:
            ids = [m for m in backlog if m is not None]
            _wait_judged(rt, ids, args.timeout)
            _, judged, _ = _judgements(rt)
            times = sorted(judged[m] for m in ids if m in judged)
            span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else 0.0
            steady: list[UUID] = []
            interval = 1.0 / args.rate
            start = time.perf_counter()
            n = args.backlog
            while time.perf_counter() - start < args.seconds:
                result = rt.memory.write(_identity(n, args.namespaces), WriteMemory(content=_content(n)))
                assert result.id is not None
                steady.append(result.id)
                n += 1
                time.sleep(max(0.0, start + (n - args.backlog) * interval - time.perf_counter()))
            rate = len(steady) / (time.perf_counter() - start)
            _wait_judged(rt, steady, args.timeout)
        finally:
            _stop(workers)
        written, judged, counts = _judgements(rt)
        lags = [(judged[m] - written[m]).total_seconds() for m in steady if m in judged]
        every = ids + steady
        run = WorkerRun(
            processes=processes,
            backlog=len(ids),
            judged_per_second=(len(times) - 1) / span if span > 0 else float("nan"),
            steady_writes=len(steady),
            writes_per_second=rate,
            lag_p50_s=percentile(lags, 0.5),
            lag_p95_s=percentile(lags, 0.95),
            judged_twice=sum(1 for m in every if counts[m] > 1),
            unjudged=sum(1 for m in every if counts[m] == 0),
        )
        return run, neighbours_per_second


def run_workers_bench(args: argparse.Namespace) -> int:
    runs: list[WorkerRun] = []
    references: list[float] = []
    for processes in (int(p) for p in args.processes.split(",")):
        run, reference = _run(processes, args)
        runs.append(run)
        references.append(reference)
    one = next((r for r in runs if r.processes == 1), None)
    two = next((r for r in runs if r.processes == 2), None)
    scaling = two.judged_per_second / one.judged_per_second if one and two and one.judged_per_second else None
    report = WorkersReport(
        namespaces=args.namespaces,
        runs=runs,
        neighbours_per_second=sum(references) / len(references),
        scaling=scaling,
    )
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        sys.stdout.write(_text(report) + "\n")
    return 0 if all(r.judged_twice == 0 and r.unjudged == 0 for r in runs) else 1


def _text(report: WorkersReport) -> str:
    lines = [f"bench workers: {report.namespaces} namespaces, `memwarden worker` processes (2 threads each)"]
    for r in report.runs:
        verdict = "ok" if r.lag_p95_s < TARGET_LAG_P95_S else "MISSED"
        lines.append(
            f"  {r.processes} process(es): drain of {r.backlog}: {r.judged_per_second:.1f} judged/s;"
            f" steady {r.writes_per_second:.1f} writes/s: lag p50 {r.lag_p50_s:.2f} s, p95 {r.lag_p95_s:.2f} s"
            f" (target < {TARGET_LAG_P95_S:.0f} s) {verdict}; judged twice {r.judged_twice}, unjudged {r.unjudged}"
        )
    lines.append(
        f"  reference: the nearest-neighbour query alone, in-process: {report.neighbours_per_second:.1f}/s"
    )
    if report.scaling is not None:
        verdict = "ok" if report.scaling >= TARGET_SCALING else "MISSED"
        lines.append(f"  2 processes / 1: {report.scaling:.2f}x (target >= {TARGET_SCALING}x) {verdict}")
    return "\n".join(lines)
