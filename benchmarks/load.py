"""``memwarden bench load``: N simulated agents against a real ``memwarden serve`` (its
projector child beside it) with ``memwarden worker`` processes judging what they write.

Each agent owns a key in one namespace of a tree (``load/teamK/agentN``) and calls, in a
mix like an agent's day: write 30 %, search 35 %, read its own memories 25 %, assemble 5 %,
stats 5 %. Reported: throughput and p50/p95/p99 latency per syscall, errors by status and
code, the resident memory (RSS) of every memwarden process over time. Checked at the end:
as many audit records as requests sent, the chain verifies, and every read model rebuilt
from the ledger equals the live one (``projections rebuild --verify``).
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.api import HttpClient, _free_port, _serve
from benchmarks.common import deployment_env, percentile, scratch_database
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from memwarden.projections.rebuild import Rebuilder
from memwarden.workers.actors import redis_broker, redis_reachable

TENANT = "load"
MIX: tuple[tuple[str, int], ...] = (
    ("write", 30),
    ("search", 35),
    ("read", 25),
    ("assemble", 5),
    ("stats", 5),
)
TOPICS = ("deploy", "billing", "on-call", "runner", "cache", "release", "incident", "schema")


class SyscallStats(msgspec.Struct, frozen=True, kw_only=True):
    syscall: str
    calls: int
    per_second: float
    p50_ms: float
    p95_ms: float
    p99_ms: float


class RssSample(msgspec.Struct, frozen=True, kw_only=True):
    second: float
    rss_mb: dict[str, float]


class LoadReport(msgspec.Struct, frozen=True, kw_only=True):
    agents: int
    seconds: float
    workers: int
    requests: int
    per_second: float
    syscalls: list[SyscallStats]
    errors: dict[str, int]
    rss: list[RssSample]
    audit_records: int
    ledger_ok: bool
    rebuild_differences: list[str]

    @property
    def ok(self) -> bool:
        return self.audit_records == self.requests and self.ledger_ok and not self.rebuild_differences


class Agent:
    """One simulated agent: its own key, connection and random stream; what it saw."""

    def __init__(self, index: int, port: int, key: str, seed: int) -> None:
        self.index = index
        self.client = HttpClient(port, key)
        self.random = random.Random(seed)  # noqa: S311 - a reproducible mix, not a secret
        self.memories: list[str] = []
        self.latencies: dict[str, list[float]] = {name: [] for name, _ in MIX}
        self.errors: Counter[str] = Counter()
        self.sent = 0

    def body(self, syscall: str, n: int) -> dict[str, Any]:
        topic = self.random.choice(TOPICS)
        if syscall == "write":
            return {"content": f"Agent {self.index} noted that the {topic} job {n} took {n % 13 + 2} minutes"}
        if syscall == "search":
            return {"query": f"how long does the {topic} job take", "k": 8}
        if syscall == "read":
            return {"id": self.random.choice(self.memories)}
        if syscall == "assemble":
            return {"budget_tokens": 512, "task_hint": f"the {topic} jobs"}
        return {}

    def run(self, deadline: float) -> None:
        names, weights = zip(*MIX, strict=True)
        n = 0
        while time.monotonic() < deadline:
            n += 1
            syscall = self.random.choices(names, weights)[0]
            if syscall == "read" and not self.memories:
                syscall = "write"
            began = time.perf_counter()
            try:
                status, payload = self.client.call("POST", f"/v1/mem/{syscall}", self.body(syscall, n))
            except OSError:  # no answer at all: counted, and the next call connects again
                self.client.close()
                status, payload = 0, b""
            self.latencies[syscall].append(time.perf_counter() - began)
            self.sent += 1
            if status != 200:
                code = msgspec.json.decode(payload).get("error", "?") if payload else "no answer"
                self.errors[f"{syscall} {status} {code}"] += 1
            elif syscall == "write":
                self.memories.append(msgspec.json.decode(payload)["id"])
        self.client.close()


def _rss_mb(pid: int) -> float:
    try:
        for line in (Path("/proc") / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


class RssWatch:
    """Samples the RSS of the served process, its children (the projector) and the workers."""

    def __init__(self, processes: dict[str, int], every: float) -> None:
        self.processes = processes
        self.every = every
        self.samples: list[RssSample] = []
        self._stop = threading.Event()
        self._began = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="rss-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.every):
                return

    def sample(self) -> None:
        rss = {name: round(_rss_mb(pid), 1) for name, pid in self.processes.items()}
        for child in _children(self.processes["serve"]):
            rss[f"serve child {child}"] = round(_rss_mb(child), 1)
        self.samples.append(RssSample(second=round(time.monotonic() - self._began, 1), rss_mb=rss))

    def stop(self) -> list[RssSample]:
        self._stop.set()
        self._thread.join(10)
        self.sample()
        return self.samples


def _keys(runtime: Runtime, agents: int, namespaces: int) -> list[str]:
    operator = Identity(TENANT, "operator@bench", "owner")
    governance = runtime.core.governance
    governance.set_policy(operator, TENANT, PolicyBody(rate_limit_per_minute=10_000_000))
    return [
        governance.issue_key(
            operator,
            IssueKey(target=f"{TENANT}/team{i % namespaces}/agent{i}", actor=f"agent{i}", role="agent"),
        ).key
        for i in range(agents)
    ]


def _audit_count(runtime: Runtime) -> int:
    count, after = 0, 0
    while batch := runtime.ledger.read(after, 5000):
        count += sum(isinstance(r.event, AuditRecorded) for r in batch)
        after = int(batch[-1].position or after)
    return count


def _start_workers(env: dict[str, str], count: int) -> list[subprocess.Popen[bytes]]:
    command = [sys.executable, "-m", "memwarden.api.cli.main", "worker", "--threads", "2"]
    return [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
        for _ in range(count)
    ]


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


def _drive(
    args: argparse.Namespace, port: int, keys: list[str], rss: RssWatch
) -> tuple[list[Agent], float, list[RssSample]]:
    agents = [Agent(i, port, key, args.seed + i) for i, key in enumerate(keys)]
    deadline = time.monotonic() + args.seconds
    threads = [threading.Thread(target=a.run, args=(deadline,), name=f"agent-{a.index}") for a in agents]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return agents, elapsed, rss.stop()


def _summary(agents: list[Agent], elapsed: float) -> tuple[list[SyscallStats], Counter[str]]:
    stats = []
    for name, _ in MIX:
        latencies = [x for a in agents for x in a.latencies[name]]
        stats.append(
            SyscallStats(
                syscall=name,
                calls=len(latencies),
                per_second=round(len(latencies) / elapsed, 1),
                p50_ms=round(percentile(latencies, 0.50) * 1000, 2),
                p95_ms=round(percentile(latencies, 0.95) * 1000, 2),
                p99_ms=round(percentile(latencies, 0.99) * 1000, 2),
            )
        )
    errors: Counter[str] = Counter()
    for agent in agents:
        errors.update(agent.errors)
    return stats, errors


def _end_checks(runtime: Runtime) -> tuple[bool, list[str]]:
    """The chain, and each read model rebuilt from the ledger against the live one."""
    runtime.reads.wait_for(runtime.ledger.head_position())
    ledger_ok = runtime.ledger.verify().ok
    rebuilder = Rebuilder(runtime.reads.runner)
    differences = [
        f"{p.name}: {d}"
        for p in runtime.reads.runner.projections
        for d in rebuilder.rebuild(p.name, verify=True, switch=False).differences
    ]
    return ledger_ok, differences


def _environment(settings: Settings, agents: int) -> dict[str, str]:
    return deployment_env(settings, MEMWARDEN_POOL_SIZE=str(agents + 4))


def _measure(args: argparse.Namespace, settings: Settings, runtime: Runtime) -> LoadReport:
    keys = _keys(runtime, args.agents, args.namespaces)
    audits_before = _audit_count(runtime)
    env = _environment(settings, args.agents)
    workers = _start_workers(env, args.workers) if redis_reachable(settings) else []
    port = _free_port()
    try:
        server = _serve(env, port, 1)
        watched = {"serve": server.pid} | {f"worker {i + 1}": w.pid for i, w in enumerate(workers)}
        try:
            agents, elapsed, samples = _drive(
                args, port, keys, RssWatch(watched, max(1.0, args.seconds / 30))
            )
        finally:
            _stop_all([server])
    finally:
        _stop_all(workers)
    stats, errors = _summary(agents, elapsed)
    requests = sum(a.sent for a in agents)
    ledger_ok, differences = _end_checks(runtime)
    return LoadReport(
        agents=args.agents,
        seconds=round(elapsed, 1),
        workers=len(workers),
        requests=requests,
        per_second=round(requests / elapsed, 1),
        syscalls=stats,
        errors=dict(errors.most_common()),
        rss=samples,
        audit_records=_audit_count(runtime) - audits_before,
        ledger_ok=ledger_ok,
        rebuild_differences=differences,
    )


def run_load_bench(args: argparse.Namespace) -> int:
    with (
        scratch_database("memwarden_bench_load") as (scratch, _params),
        Runtime(msgspec.structs.replace(scratch, pool_size=8), follow=False) as runtime,
    ):
        if redis_reachable(scratch):
            broker = redis_broker(scratch)
            broker.flush_all()  # what an interrupted run on a database of this name left queued
            broker.close()
        report = _measure(args, scratch, runtime)
    sys.stdout.write((msgspec.json.encode(report).decode() if args.json else _text(report)) + "\n")
    return 0 if report.ok else 1


def _text(report: LoadReport) -> str:
    lines = [
        f"bench load: {report.agents} agents for {report.seconds:.0f} s, {report.workers} worker process(es):"
        f" {report.requests} requests, {report.per_second:.1f}/s",
        f"  {'syscall':10} {'calls':>7} {'per s':>7} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}",
    ]
    lines += [
        f"  {s.syscall:10} {s.calls:>7} {s.per_second:>7.1f} {s.p50_ms:>8.1f} {s.p95_ms:>8.1f} {s.p99_ms:>8.1f}"
        for s in report.syscalls
    ]
    lines.append("  errors: " + (", ".join(f"{k}: {v}" for k, v in report.errors.items()) or "none"))
    first, last = report.rss[0], report.rss[-1]
    lines.append(
        "  RSS MB: "
        + ", ".join(f"{name} {first.rss_mb.get(name, 0):.0f} -> {mb:.0f}" for name, mb in last.rss_mb.items())
        + f" ({len(report.rss)} samples)"
    )
    checks = [
        (
            "audit records == requests",
            f"{report.audit_records} == {report.requests}",
            report.audit_records == report.requests,
        ),
        ("ledger verifies", "", report.ledger_ok),
        (
            "rebuild --verify agrees",
            "; ".join(report.rebuild_differences[:5]),
            not report.rebuild_differences,
        ),
    ]
    lines += [f"  check {name}: {'ok' if ok else 'FAILED'} {detail}".rstrip() for name, detail, ok in checks]
    return "\n".join(lines)
