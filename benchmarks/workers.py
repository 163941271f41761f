"""``memwarden bench workers``: the conflict autopilot under `memwarden worker` processes.

For 1 and 2 worker processes (back to back, ``--repeat`` rounds), each on a scratch
database of the configured server:

- **drain**: a backlog of memories written while no worker runs, spread over N namespaces,
  then the workers start; memories judged per second from the first judgement to the last,
  with the CPU the worker processes and PostgreSQL spent meanwhile (per judgement) and how
  busy the whole machine was;
- **steady**: an open-loop write load offered at a fixed rate by several writer threads
  (each write is due at its slot whether or not the earlier ones are done, as independent
  agents would write) while the workers run; the rate achieved, and the lag of each memory
  from its commit (``recorded_at``) to its judgement (the ``ConflictsJudged`` event's
  time), p50/p95.

Every memory must be judged exactly once (checked on the ledger). The reference, in the
same run: the nearest-neighbour query alone (the pass's read), per second, in-process.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from uuid import UUID

import msgspec

from benchmarks.common import deployment_env, percentile, scratch_database
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.autopilot import MIN_COSINE, NEIGHBOURS_K
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import ConflictsJudged, MemoryWritten
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings
from memwarden.projections.search.neighbours import SearchNeighbours
from memwarden.workers.actors import redis_broker

ROOT = Path(__file__).resolve().parents[3]
TARGET_LAG_P95_S = 2.0
TARGET_SCALING = 1.4
TICKS = os.sysconf("SC_CLK_TCK")


class WorkerRun(msgspec.Struct, frozen=True, kw_only=True):
    round: int
    processes: int
    backlog: int
    judged_per_second: float
    worker_cpu_ms_per_judgement: float
    postgres_cpu_ms_per_judgement: float | None
    """None when the server's processes cannot be seen (not on this machine)."""
    machine_busy: float
    """The share of all cores busy during the drain, whoever used them."""
    offered_writes_per_second: float
    steady_writes: int
    writes_per_second: float
    lag_p50_s: float
    lag_p95_s: float
    """From the memory's ``recorded_at`` (its write's time, a little before the commit)."""
    write_p50_s: float
    write_p95_s: float
    """A steady write from its due time to the call's return: the writer's own lag."""
    after_write_p50_s: float
    after_write_p95_s: float
    """From the write call's return (after the commit) to the judgement."""
    judged_twice: int
    unjudged: int


class WorkersReport(msgspec.Struct, frozen=True, kw_only=True):
    namespaces: int
    writers: int
    runs: list[WorkerRun]
    neighbours_per_second: float
    scalings: list[float]
    scaling: float | None
    """The median of the rounds' 2-process / 1-process drain rates."""


def _content(n: int) -> str:
    hour = 8 + n % 10
    return f"The sync of service {n} runs at {hour}:00 on day {n % 28 + 1}"


def _identity(n: int, namespaces: int) -> Identity:
    return Identity(namespace=f"bench/team{n % namespaces}", actor="bench", role="agent")


def _start_workers(settings: Settings, count: int) -> list[subprocess.Popen[str]]:
    env = deployment_env(settings, PYTHONPATH=str(ROOT))
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "memwarden.api.cli.main", "worker", "--threads", "2"],
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


class LedgerWatch:
    """Each memory's commit time and its judgements, read from the ledger as it grows (only
    the events since the last look: the watch must not load the machine it measures)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.written: dict[UUID, datetime] = {}
        self.judged: dict[UUID, datetime] = {}
        self.counts: Counter[UUID] = Counter()
        self.after = 0

    def poll(self) -> None:
        while batch := self.rt.ledger.read(self.after, 5000):
            for r in batch:
                if isinstance(r.event, MemoryWritten):
                    self.written[r.event.memory_id] = r.event.at
                elif isinstance(r.event, ConflictsJudged) and r.event.outcome == "judged":
                    self.judged.setdefault(r.event.memory_id, r.event.at)
                    self.counts[r.event.memory_id] += 1
            self.after = int(batch[-1].position or self.after)

    def wait_judged(self, ids: list[UUID], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if all(m in self.judged for m in ids):
                return
            time.sleep(0.5)


def _cpu_seconds(pids: list[int]) -> float:
    """User and system CPU of these processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone: its time is lost to the sum
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def _backends(rt: Runtime) -> list[int] | None:
    """The server processes serving the scratch database (workers, projections, this
    process), if the server runs on this machine; None when their /proc entries are not
    ours to read."""
    with rt.ledger.datastore.get_connection() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'"
        ).fetchall()
    pids = [int(r["pid"]) for r in rows]
    return pids if pids and all(Path(f"/proc/{p}/stat").exists() for p in pids) else None


class CpuMeter:
    """CPU spent by the workers, by the database's server processes, and by the machine."""

    def __init__(self, workers: list[int], rt: Runtime) -> None:
        self.workers = workers
        self.rt = rt
        self.start = self._sample()

    def _sample(self) -> tuple[float, dict[int, float] | None, tuple[int, int]]:
        backends = _backends(self.rt)
        server = None if backends is None else {p: _cpu_seconds([p]) for p in backends}
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return _cpu_seconds(self.workers), server, (sum(fields), fields[3] + fields[4])

    def stop(self) -> tuple[float, float | None, float]:
        """Worker CPU seconds, server CPU seconds, the machine's busy share, since start."""
        workers, server, (total, idle) = self._sample()
        before = self.start[1]
        spent = None
        if server is not None and before is not None:
            spent = sum(t - before.get(p, 0.0) for p, t in server.items())
        elapsed, idled = total - self.start[2][0], idle - self.start[2][1]
        busy = 1 - idled / elapsed if elapsed else float("nan")
        return workers - self.start[0], spent, busy


class Offered(msgspec.Struct, frozen=True):
    """What a write load did: the memories, in the order done; when each write call
    returned (wall clock); how long each took from its due time."""

    ids: list[UUID]
    returned: dict[UUID, datetime]
    latencies: list[float]


def _offer(rt: Runtime, args: argparse.Namespace, first: int, total: int, rate: float | None) -> Offered:
    """Write memories ``first`` .. ``first + total - 1`` from ``args.writers`` threads, open
    loop: write i is due at ``i / rate`` (``rate`` None: at once); a free thread takes the
    next write as soon as it is due (at once, when it is late)."""
    due = [0]
    lock = threading.Lock()
    done = Offered([], {}, [])
    start = time.perf_counter()

    def writer() -> None:
        while True:
            with lock:
                i = due[0]
                due[0] += 1
            if i >= total:
                return
            at = start + i / rate if rate is not None else time.perf_counter()
            time.sleep(max(0.0, at - time.perf_counter()))
            n = first + i
            result = rt.memory.write(_identity(n, args.namespaces), WriteMemory(content=_content(n)))
            assert result.id is not None
            with lock:
                done.ids.append(result.id)
                done.returned[result.id] = rt.memory.clock()
                done.latencies.append(time.perf_counter() - at)

    threads = [threading.Thread(target=writer, name=f"bench-writer-{t}") for t in range(args.writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done


def _neighbours_per_second(rt: Runtime, backlog: list[UUID]) -> float:
    neighbours = SearchNeighbours(rt.reads.search, rt.reads.wait_for)
    rt.reads.wait_for(rt.ledger.head_position())
    began = time.perf_counter()
    for memory_id in backlog:
        neighbours.nearest(memory_id, NEIGHBOURS_K, MIN_COSINE, 0)
    return len(backlog) / (time.perf_counter() - began)


def _run(round_: int, processes: int, args: argparse.Namespace) -> tuple[WorkerRun, float]:
    with (
        scratch_database(f"memwarden_bench_workers_{processes}") as (scratch, _params),
        Runtime(scratch) as rt,
    ):
        broker = redis_broker(scratch)
        broker.flush_all()  # what an interrupted run on a database of this name left queued
        broker.close()
        ids = _offer(rt, args, 0, args.backlog, None).ids
        reference = _neighbours_per_second(rt, ids)
        watch = LedgerWatch(rt)
        watch.poll()
        workers = _start_workers(scratch, processes)
        try:
            meter = CpuMeter([w.pid for w in workers], rt)
            watch.wait_judged(ids, args.timeout)
            worker_cpu, server_cpu, busy = meter.stop()
            began = time.perf_counter()
            offered = _offer(rt, args, args.backlog, int(args.rate * args.seconds), args.rate)
            steady = offered.ids
            rate = len(steady) / (time.perf_counter() - began)
            watch.wait_judged(steady, args.timeout)
        finally:
            _stop(workers)
        watch.poll()
        times = sorted(watch.judged[m] for m in ids if m in watch.judged)
        span = (times[-1] - times[0]).total_seconds() if len(times) > 1 else 0.0
        lags = [(watch.judged[m] - watch.written[m]).total_seconds() for m in steady if m in watch.judged]
        after_write = [
            (watch.judged[m] - offered.returned[m]).total_seconds() for m in steady if m in watch.judged
        ]
        every = ids + steady
        judged = max(len(times), 1)
        run = WorkerRun(
            round=round_,
            processes=processes,
            backlog=len(ids),
            judged_per_second=(len(times) - 1) / span if span > 0 else float("nan"),
            worker_cpu_ms_per_judgement=1000 * worker_cpu / judged,
            postgres_cpu_ms_per_judgement=None if server_cpu is None else 1000 * server_cpu / judged,
            machine_busy=busy,
            offered_writes_per_second=args.rate,
            steady_writes=len(steady),
            writes_per_second=rate,
            lag_p50_s=percentile(lags, 0.5),
            lag_p95_s=percentile(lags, 0.95),
            write_p50_s=percentile(offered.latencies, 0.5),
            write_p95_s=percentile(offered.latencies, 0.95),
            after_write_p50_s=percentile(after_write, 0.5),
            after_write_p95_s=percentile(after_write, 0.95),
            judged_twice=sum(1 for m in every if watch.counts[m] > 1),
            unjudged=sum(1 for m in every if watch.counts[m] == 0),
        )
        return run, reference


def run_workers_bench(args: argparse.Namespace) -> int:
    runs: list[WorkerRun] = []
    references: list[float] = []
    scalings: list[float] = []
    counts = [int(p) for p in args.processes.split(",")]
    for round_ in range(1, args.repeat + 1):
        mine = []
        for processes in counts:
            run, reference = _run(round_, processes, args)
            mine.append(run)
            references.append(reference)
        one = next((r for r in mine if r.processes == 1), None)
        two = next((r for r in mine if r.processes == 2), None)
        if one and two and one.judged_per_second:
            scalings.append(two.judged_per_second / one.judged_per_second)
        runs.extend(mine)
    report = WorkersReport(
        namespaces=args.namespaces,
        writers=args.writers,
        runs=runs,
        neighbours_per_second=sum(references) / len(references),
        scalings=scalings,
        scaling=statistics.median(scalings) if scalings else None,
    )
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        sys.stdout.write(_text(report) + "\n")
    return 0 if all(r.judged_twice == 0 and r.unjudged == 0 for r in runs) else 1


def _text(report: WorkersReport) -> str:
    lines = [
        f"bench workers: {report.namespaces} namespaces, {report.writers} writer threads,"
        " `memwarden worker` processes (2 threads each)"
    ]
    for r in report.runs:
        verdict = "ok" if r.lag_p95_s < TARGET_LAG_P95_S else "MISSED"
        server = (
            "n/a" if r.postgres_cpu_ms_per_judgement is None else f"{r.postgres_cpu_ms_per_judgement:.1f}"
        )
        lines.append(
            f"  round {r.round}, {r.processes} process(es): drain of {r.backlog}: {r.judged_per_second:.1f} judged/s"
            f" (CPU per judgement: workers {r.worker_cpu_ms_per_judgement:.1f} ms, PostgreSQL {server} ms;"
            f" machine {100 * r.machine_busy:.0f}% busy); steady: offered {r.offered_writes_per_second:.0f}"
            f" writes/s, reached {r.writes_per_second:.1f} (write p50 {r.write_p50_s:.2f} s, p95"
            f" {r.write_p95_s:.2f} s): lag p50 {r.lag_p50_s:.2f} s, p95 {r.lag_p95_s:.2f} s"
            f" (target < {TARGET_LAG_P95_S:.0f} s) {verdict}, after the write returned p50"
            f" {r.after_write_p50_s:.2f} s, p95 {r.after_write_p95_s:.2f} s;"
            f" judged twice {r.judged_twice}, unjudged {r.unjudged}"
        )
    lines.append(
        f"  reference: the nearest-neighbour query alone, in-process: {report.neighbours_per_second:.1f}/s"
    )
    if report.scaling is not None:
        verdict = "ok" if report.scaling >= TARGET_SCALING else "MISSED"
        each = ", ".join(f"{s:.2f}x" for s in report.scalings)
        lines.append(
            f"  2 processes / 1: {report.scaling:.2f}x median of {each} (target >= {TARGET_SCALING}x) {verdict}"
        )
    return "\n".join(lines)
