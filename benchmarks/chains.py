"""`memwarden bench write --tenants N --writers-per-tenant W`: N tenants writing at once on
one ledger chain (``MEMWARDEN_LEDGER_CHAINS=global``), on a chain per tenant (``tenant``)
and, the ceiling, each tenant on a database of its own (``sharded``: single-chain mode in
each, so no lock at all is shared between tenants, the end state Citus gives; deploy/SCALE.md
§3), same run, each mode on scratch databases of its own. Every mode is reported next to the
single chain: the per-tenant chain's ratio is the target's, the ceiling's says how much any
removal of the shared lock can give on this machine.

Writers are PROCESSES, one per tenant (each with W writer threads sharing its ledger, so a
tenant's writers share its group commits, as in an API process): threads of one process
cannot show the cost of the ledger's lock, because one process's group commit already
turns all of its writers into one append at a time (nobody else waits on its lock) and
the GIL caps it at one core of Python work, so the lock is never what the writers wait
for. N processes are N appenders, as N API processes or machines would be: on one chain
they queue on one lock (held through each commit); on a chain per tenant they do not.

Next to the throughput the bench shows where the time goes: the writer processes' CPU per
write (Python: deciding, sealing, embedding), the share of the database's active sessions
found waiting on a lock (sampled every 10 ms), and how busy the machine's CPUs were.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import msgspec
import psycopg

from benchmarks.common import RunStats, scratch_database, summarize, timed_threads
from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import Settings

TARGET = 1.5
"""A chain per tenant writes at least this many times as fast as the single chain."""
MODES = ("global", "tenant", "sharded")
"""The single chain, a chain per tenant, and the ceiling: a database per tenant."""
WARM_UP_WRITES = 20
SAMPLE_SECONDS = 0.01


class ChainsRow(msgspec.Struct, frozen=True, kw_only=True):
    chains: str
    """``global``, ``tenant`` or ``sharded`` (a database per tenant, single-chain mode in each)."""
    writers_as: str
    """``processes`` (a process per tenant: the measurement) or ``threads`` (the reference:
    every writer a thread of one process)."""
    tenants: int
    writers_per_tenant: int
    stats: RunStats
    writer_cpu_ms_per_write: float
    """User+system CPU of the writer processes per write (all their threads)."""
    writer_cores: float
    """The writer processes' CPU over the run's wall time: cores of Python kept busy."""
    server_cpu_ms_per_write: float
    """CPU of the PostgreSQL server processes serving the bench's database, per write."""
    wal_flushes_per_write: float
    """WAL fsyncs of the server per write: below one, commits shared a flush."""
    lock_wait_share: float
    """Of the database sessions found active in a sample, the share waiting on a lock."""
    machine_busy: float
    """How busy the machine's CPUs were over the run (every process, not only ours)."""
    chain_ok: bool
    """Every chain of the mode's databases verifies."""
    vs_single: float = 0.0
    """Writes per second over the single chain's, same round and same writers."""
    round: int = 1
    """Which round (``--rounds``): each round runs every mode once, one after the other."""


class ChainsReport(msgspec.Struct, frozen=True, kw_only=True):
    rows: list[ChainsRow]
    ratio: float
    """Chain per tenant over single chain (processes): the target's ratio (median of the rounds)."""
    ceiling_ratio: float
    """A database per tenant over single chain (processes): what no shared lock gives here
    (median of the rounds)."""
    target: float
    embedder: str


def tenant_writer(core: Core, tenant: int) -> Callable[[int], Callable[[int], None]]:
    from benchmarks.write import sentence  # noqa: PLC0415 - write.py imports this module

    def make(index: int) -> Callable[[int], None]:
        identity = Identity(f"tenant{tenant}/team", f"agent-{index}", "agent")

        def work(n: int) -> None:
            result = core.memory.write(identity, sentence(tenant * 100 + index, n))
            if result.outcome == "rejected":
                raise RuntimeError(f"benchmark write rejected: {result.rejected}")

        return work

    return make


def writer_process(
    settings: Settings, tenant: int, writers: int, seconds: float, sync: tuple[Any, Any, Any]
) -> None:
    """One tenant's writers (the target of a spawned process): warm up, wait for every
    tenant, write for ``seconds``, report latencies, elapsed time and CPU used, and keep its
    connections open until told (the parent reads their server processes' CPU)."""
    start, results, finish = sync
    try:
        with open_core(settings) as core:
            make = tenant_writer(core, tenant)
            warm = make(writers)  # a writer of its own: the measured ones start at n = 0
            for n in range(WARM_UP_WRITES):
                warm(n)
            start.wait()
            before = resource.getrusage(resource.RUSAGE_SELF)
            latencies, elapsed = timed_threads(writers, seconds, make)
            after = resource.getrusage(resource.RUSAGE_SELF)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            results.put((tenant, latencies, elapsed, cpu, None))
            finish.wait(timeout=120)
    except BaseException as error:  # noqa: BLE001 - reported by the parent, which exits 1
        start.abort()  # a writer that cannot start: the parent stops waiting for it
        results.put((tenant, [], 0.0, 0.0, f"{type(error).__name__}: {error}"))


def backend_cpu(dbnames: Collection[str]) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL server process serving one of ``dbnames``
    (found by its process title, ``postgres: user dbname …``), on this machine."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            title = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if not title.startswith("postgres: ") or not any(f" {name} " in title for name in dbnames):
                continue
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(proc.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the machine since boot, from /proc/stat."""
    first = Path("/proc/stat").read_text(encoding="ascii").splitlines()[0]
    fields = [int(x) for x in first.split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@contextmanager
def lock_sampler(params: ConnectionParams, dbnames: list[str]) -> Iterator[list[tuple[int, int]]]:
    """Sample, every ``SAMPLE_SECONDS``, (active sessions, of them waiting on a lock) of the
    databases (on the server of ``params``); the samples are in the yielded list once the
    block ends."""
    samples: list[tuple[int, int]] = []
    stop = threading.Event()
    query = (
        "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') FROM pg_stat_activity"
        " WHERE datname = ANY(%s) AND state = 'active' AND pid <> pg_backend_pid()"
    )

    def sample() -> None:
        with psycopg.connect(params.conninfo(), autocommit=True) as conn:
            while not stop.wait(SAMPLE_SECONDS):
                row = conn.execute(query, (dbnames,)).fetchone()
                if row is not None:
                    samples.append((int(row[0]), int(row[1])))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=5)


class Measured(msgspec.Struct, frozen=True, kw_only=True):
    latencies: list[float]
    elapsed: float
    writer_cpu: float
    server_cpu: float
    wal_flushes: int
    machine_busy: float
    samples: list[tuple[int, int]]


def wal_flushes(params: ConnectionParams) -> int:
    """The server's WAL fsyncs so far (every database of it: run the bench on a server of its
    own, as the embedded default is), from ``pg_stat_io`` (PostgreSQL 16 and later)."""
    with psycopg.connect(params.conninfo(), autocommit=True) as conn:
        row = conn.execute("SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'").fetchone()
    return int(row[0]) if row is not None else 0


@contextmanager
def measuring(databases: list[ConnectionParams]) -> Iterator[dict[str, Any]]:
    """Measure the machine, the databases' server processes and their lock waits over the
    block (the databases are on one server); the figures are in the yielded dict once it ends."""
    names = sorted({p.dbname for p in databases})
    found: dict[str, Any] = {}
    busy0, total0 = _machine_ticks()
    server0 = backend_cpu(names)
    flushes0 = wal_flushes(databases[0])
    with lock_sampler(databases[0], names) as samples:
        yield found
    busy1, total1 = _machine_ticks()
    server1 = backend_cpu(names)
    found["wal_flushes"] = wal_flushes(databases[0]) - flushes0
    found["server_cpu"] = sum(cpu - server0.get(pid, 0.0) for pid, cpu in server1.items())
    found["machine_busy"] = round((busy1 - busy0) / max(1, total1 - total0), 3)
    found["samples"] = samples


class Target(msgspec.Struct, frozen=True):
    """Where a mode's tenants write: one database for all (``global``, ``tenant``), or a
    database each (``sharded``); the settings and connection of tenant ``t`` are at ``t``
    (or the only ones)."""

    chains: str
    databases: list[tuple[Settings, ConnectionParams]]

    def of(self, tenant: int) -> tuple[Settings, ConnectionParams]:
        return self.databases[tenant % len(self.databases)]

    def params(self) -> list[ConnectionParams]:
        return [params for _, params in self.databases]


def _run_threads(settings: Settings, target: Target, tenants: int, writers: int, seconds: float) -> Measured:
    """The reference: every tenant's writers as threads of this one process (one database)."""
    with open_core(msgspec.structs.replace(settings, pool_size=tenants * writers + 2)) as core:
        makers = [tenant_writer(core, t) for t in range(tenants)]
        warm = [makers[t](writers) for t in range(tenants)]
        for n in range(WARM_UP_WRITES):
            warm[n % tenants](n)

        def make(index: int) -> Callable[[int], None]:
            return makers[index // writers](index % writers)

        before = resource.getrusage(resource.RUSAGE_SELF)
        with measuring(target.params()) as found:
            latencies, elapsed = timed_threads(tenants * writers, seconds, make)
        after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measured(latencies=latencies, elapsed=elapsed, writer_cpu=cpu, **found)


def _run_processes(
    settings: Settings, target: Target, tenants: int, writers: int, seconds: float
) -> Measured:
    """Start a writer process per tenant (on its database), let them write at once, and
    measure meanwhile."""
    ctx = multiprocessing.get_context("spawn")
    start, results, finish = ctx.Barrier(tenants + 1), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=writer_process,
            args=(_tenant_settings(settings, target, t), t, writers, seconds, (start, results, finish)),
            daemon=True,
        )
        for t in range(tenants)
    ]
    for p in procs:
        p.start()
    try:
        try:
            start.wait(timeout=300)
        except threading.BrokenBarrierError:
            failed = results.get(timeout=60)
            raise RuntimeError(f"the writer process of tenant {failed[0]} failed: {failed[4]}") from None
        with measuring(target.params()) as found:
            outcomes = [results.get(timeout=seconds + 300) for _ in procs]
    finally:
        finish.set()
        for p in procs:
            p.join(timeout=60)
    errors = [error for *_rest, error in outcomes if error]
    if errors:
        raise RuntimeError(f"a writer process failed: {errors[0]}")
    return Measured(
        latencies=[x for _, lat, *_ in outcomes for x in lat],
        elapsed=max(o[2] for o in outcomes),
        writer_cpu=sum(o[3] for o in outcomes),
        **found,
    )


def _tenant_settings(settings: Settings, target: Target, tenant: int) -> Settings:
    """The mode's settings, on the database tenant ``tenant`` writes to."""
    return msgspec.structs.replace(settings, database_url=target.of(tenant)[0].database_url)


def _chains_mode(chains: str) -> str:
    """The ledger setting of a bench mode: a database per tenant runs the single chain in each."""
    return "global" if chains == "sharded" else chains


def run_mode(
    target: Target,
    shape: tuple[int, int],
    seconds: float,
    writers_as: str = "processes",
) -> ChainsRow:
    """``shape``: (tenants, writers per tenant) writing at once on fresh databases, in one
    mode; the writers are a process per tenant, or threads of this process."""
    tenants, writers = shape
    settings = msgspec.structs.replace(
        target.of(0)[0], ledger_chains=_chains_mode(target.chains), pool_size=writers + 2
    )
    run = _run_processes if writers_as == "processes" else _run_threads
    m = run(settings, target, tenants, writers, seconds)
    chain_ok = all(_verifies(_tenant_settings(settings, target, t)) for t in range(len(target.databases)))
    active = sum(a for a, _ in m.samples)
    per_write = 1000 / max(1, len(m.latencies))
    return ChainsRow(
        chains=target.chains,
        writers_as=writers_as,
        tenants=tenants,
        writers_per_tenant=writers,
        stats=summarize(f"{target.chains} chains", tenants * writers, m.latencies, m.elapsed),
        writer_cpu_ms_per_write=round(m.writer_cpu * per_write, 3),
        writer_cores=round(m.writer_cpu / m.elapsed, 2) if m.elapsed else 0.0,
        server_cpu_ms_per_write=round(m.server_cpu * per_write, 3),
        wal_flushes_per_write=round(m.wal_flushes * per_write / 1000, 3),
        lock_wait_share=round(sum(w for _, w in m.samples) / active, 3) if active else 0.0,
        machine_busy=m.machine_busy,
        chain_ok=chain_ok,
    )


def _verifies(settings: Settings) -> bool:
    with open_core(settings) as core:
        return core.ledger.verify().ok


def _targets(stack: ExitStack, tenants: int) -> dict[str, Target]:
    """Each mode's scratch databases: one for each of the two chain modes, one per tenant
    for the ceiling."""

    def scratch(name: str) -> tuple[Settings, ConnectionParams]:
        return stack.enter_context(scratch_database(f"memwarden_bench_chains_{name}"))

    return {
        "global": Target("global", [scratch("global")]),
        "tenant": Target("tenant", [scratch("tenant")]),
        "sharded": Target("sharded", [scratch(f"shard{t}") for t in range(tenants)]),
    }


def _with_ratios(rows: list[ChainsRow]) -> list[ChainsRow]:
    """Every row with its writes per second over the single chain's (same round and writers)."""
    single = {(r.round, r.writers_as): r.stats.per_second for r in rows if r.chains == "global"}

    def ratio(r: ChainsRow) -> float:
        base = single.get((r.round, r.writers_as))
        return round(r.stats.per_second / base, 3) if base else 0.0

    return [msgspec.structs.replace(r, vs_single=ratio(r)) for r in rows]


def _median_ratio(rows: list[ChainsRow], chains: str) -> float:
    return round(
        statistics.median(r.vs_single for r in rows if r.chains == chains and r.writers_as == "processes"), 3
    )


def _rounds(
    targets: dict[str, Target], shape: tuple[int, int], seconds: float, args: argparse.Namespace
) -> list[ChainsRow]:
    """Every mode once a round, one after the other (a load that comes and goes on a shared
    machine then falls on every mode), then the threads' reference if asked."""
    rows = [
        msgspec.structs.replace(run_mode(targets[mode], shape, seconds), round=n)
        for n in range(1, max(1, int(getattr(args, "rounds", 1))) + 1)
        for mode in MODES
    ]
    if getattr(args, "thread_reference", False):
        # threads of one process write to one database: no ceiling row
        rows.extend(run_mode(targets[mode], shape, seconds, "threads") for mode in MODES[:2])
    return _with_ratios(rows)


def run_chains_bench(args: argparse.Namespace) -> int:
    tenants, writers, seconds = int(args.tenants), int(args.writers_per_tenant), float(args.seconds)
    if tenants < 1 or writers < 1:
        sys.stderr.write("--tenants and --writers-per-tenant must be at least 1\n")
        return 2
    with ExitStack() as stack:
        rows = _rounds(_targets(stack, tenants), (tenants, writers), seconds, args)
    report = ChainsReport(
        rows=rows,
        ratio=_median_ratio(rows, "tenant"),
        ceiling_ratio=_median_ratio(rows, "sharded"),
        target=TARGET,
        embedder=Settings.from_env().embedder,
    )
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        _print(report)
    return 0 if all(r.chain_ok for r in rows) else 1


def _print(report: ChainsReport) -> None:
    out = sys.stdout.write
    first = report.rows[0]
    out(
        f"memwarden bench write — {first.tenants} tenants x {first.writers_per_tenant} writers"
        f" (a process per tenant): one chain, a chain per tenant, and the ceiling (a database per"
        f" tenant), same run; embedder {report.embedder}\n"
    )
    out(
        f"{'round':>5} {'chains':>7} {'writers':>9} | {'w/s':>8} {'x single':>8} {'p50 ms':>8} {'p95 ms':>8} |"
        f" {'py ms/w':>8} {'py cores':>8} {'pg ms/w':>8} {'fsync/w':>7} {'lock wait':>9} {'machine':>7} | chain\n"
    )
    for r in report.rows:
        out(
            f"{r.round:>5} {r.chains:>7} {r.writers_as:>9} | {r.stats.per_second:>8.1f} {r.vs_single:>7.2f}x"
            f" {r.stats.p50_ms:>8.2f} {r.stats.p95_ms:>8.2f} |"
            f" {r.writer_cpu_ms_per_write:>8.2f} {r.writer_cores:>8.2f} {r.server_cpu_ms_per_write:>8.2f}"
            f" {r.wal_flushes_per_write:>7.2f}"
            f" {r.lock_wait_share:>9.1%}"
            f" {r.machine_busy:>7.0%} | {'verifies' if r.chain_ok else 'BROKEN'}\n"
        )
    verdict = "ok" if report.ratio >= report.target else "MISSED"
    out(
        f"median of the rounds, per tenant / single chain (processes): {report.ratio:.2f}x (target >= {report.target:.1f}x) {verdict};"
        f" ceiling (a database per tenant) / single chain: {report.ceiling_ratio:.2f}x\n"
    )
