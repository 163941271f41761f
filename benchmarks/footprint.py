"""``memwarden bench footprint``: what memwarden costs the machine it runs on.

- The resident memory (RSS) of ``memwarden serve``, its projector child and one
  ``memwarden worker``, once started (the API's models warmed) and again after ``--writes``
  memories written over HTTP (``write_batch``), a few searches and the projector caught up.
  The three together are held to ``TARGET_MB`` (issue 27).
- The size of a plain ``pip install`` of this checkout into a fresh virtualenv, and its
  largest distributions (skipped with ``--no-install``).
- The wall time of ``memwarden --help`` and of ``memwarden keys list`` (median of
  ``CLI_RUNS``, after one run that writes the byte-code a user's install has).

The worker needs Redis: ``REDIS_URL`` when it answers, else a ``redis-server`` of the
bench's own on a free loopback port (no worker when neither is there: the report says so).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import msgspec

from benchmarks.api import _free_port, _serve
from benchmarks.common import scratch_database
from benchmarks.load import _children, _environment, _keys, _rss_mb, _start_workers, _stop_all
from benchmarks.machine import Machine, invocation, machine_now
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from memwarden.workers.actors import redis_reachable

TARGET_MB = 700.0
"""serve, the projector and a worker together, after start and after the writes (issue 27)."""
CLI_RUNS = 5
SETTLE_SECONDS = 60.0
"""The longest wait for a process's RSS to stop growing after start."""
CHECKOUT = Path(__file__).resolve().parents[1]


class ProcessFootprint(msgspec.Struct, frozen=True, kw_only=True):
    process: str
    after_start_mb: float
    after_writes_mb: float


class Distribution(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    mb: float


class InstallSize(msgspec.Struct, frozen=True, kw_only=True):
    total_mb: float
    """The virtualenv's site-packages after ``pip install <checkout>``."""
    seconds: float
    largest: list[Distribution]


class FootprintReport(msgspec.Struct, frozen=True, kw_only=True):
    writes: int
    write_seconds: float
    processes: list[ProcessFootprint]
    after_start_mb: float
    after_writes_mb: float
    target_mb: float
    worker: str
    """How the worker ran (``REDIS_URL``, a redis-server of the bench's own) or why it did not."""
    install: InstallSize | None
    help_seconds: float
    keys_list_seconds: float
    machine: Machine
    command: str

    @property
    def ok(self) -> bool:
        return max(self.after_start_mb, self.after_writes_mb) <= self.target_mb


# -- processes and their memory ---------------------------------------------------------------------


def _settled_rss(pids: dict[str, int], limit: float) -> dict[str, float]:
    """Each process's RSS (MB) once no process grew by more than 2 MB in two seconds: the
    API loads its models in background threads after it answers /readyz."""
    deadline = time.monotonic() + limit
    before = _sample(pids)
    while time.monotonic() < deadline:
        time.sleep(2.0)
        now = _sample(pids)
        if all(now[name] - before.get(name, 0.0) <= 2.0 for name in now):
            return now
        before = now
    return before


def _sample(pids: dict[str, int]) -> dict[str, float]:
    return {name: round(_rss_mb(pid), 1) for name, pid in pids.items()}


def _watched(server: subprocess.Popen[bytes], worker: subprocess.Popen[bytes] | None) -> dict[str, int]:
    """serve, its projector child (the one ``memwarden project`` it starts) and the worker."""
    pids = {"serve": server.pid}
    for child in _children(server.pid):
        pids["projector"] = child
    if worker is not None:
        pids["worker"] = worker.pid
    return pids


@contextmanager
def _redis(settings: Settings) -> Iterator[tuple[str | None, str]]:
    """(a Redis URL, how it was had) or (None, why there is none)."""
    if redis_reachable(settings):
        yield settings.redis_url, "REDIS_URL"
        return
    binary = shutil.which("redis-server")
    if binary is None:
        yield None, "no worker: REDIS_URL does not answer and there is no redis-server"
        return
    port = _free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 30
        while not redis_reachable(msgspec.structs.replace(settings, redis_url=url)):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the bench's redis-server did not answer")
            time.sleep(0.2)
        yield url, "a redis-server of the bench's own"
    finally:
        _stop_all([process])


# -- the writes -----------------------------------------------------------------------------------------


TOPICS = ("deploy", "billing", "on-call", "runner", "cache", "release", "incident", "schema")


def _texts(count: int) -> list[str]:
    """Distinct memories (no two deduplicate), of an agent's note's length."""
    return [
        f"Note {n}: the {TOPICS[n % len(TOPICS)]} job of team {n % 17} took {n % 13 + 2} minutes"
        f" on runner {n % 29}, after the change {n * 7919 % 100_003}"
        for n in range(count)
    ]


BATCH = 64
"""Memories a ``write_batch`` request: a full batch (256) can outlast the request deadline
on a busy two-core machine, and this bench measures memory, not the write path's speed."""


def _write(port: int, key: str, count: int) -> float:
    """``count`` memories over HTTP, ``BATCH`` a request; the seconds it took."""
    texts = _texts(count)
    began = time.perf_counter()
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=300) as http:
        for start in range(0, count, BATCH):
            body = {"items": [{"content": text} for text in texts[start : start + BATCH]]}
            response = http.post("/v1/mem/write_batch", json=body)
            if response.status_code != 200:
                raise RuntimeError(f"write_batch failed: {response.status_code} {response.text[:300]}")
        for topic in TOPICS:  # a search uses the reranker, as a served process would
            response = http.post("/v1/mem/search", json={"query": f"how long does the {topic} job take"})
            if response.status_code != 200:
                raise RuntimeError(f"search failed: {response.status_code} {response.text[:300]}")
    return time.perf_counter() - began


def _caught_up(runtime: Runtime, limit: float) -> None:
    """Until every projection's tracked position (the projector's) reaches the head."""
    deadline = time.monotonic() + limit
    while any(status.lag > 0 for status in runtime.reads.runner.status()):
        if time.monotonic() > deadline:
            raise RuntimeError("the projector did not catch up")
        time.sleep(0.5)


def measure_processes(
    settings: Settings, runtime: Runtime, writes: int
) -> tuple[list[ProcessFootprint], float, str]:
    key = _keys(runtime, 1, 1)[0]
    with _redis(settings) as (redis_url, how):
        env = _environment(settings, 4) | {"MEMWARDEN_REQUEST_DEADLINE_SECONDS": "120"}
        env |= {"REDIS_URL": redis_url} if redis_url else {}
        workers = _start_workers(env, 1) if redis_url else []
        port = _free_port()
        try:
            server = _serve(env, port, 1)
            try:
                pids = _watched(server, workers[0] if workers else None)
                started = _settled_rss(pids, SETTLE_SECONDS)
                seconds = _write(port, key, writes)
                _caught_up(runtime, 600)
                after = _settled_rss(pids, SETTLE_SECONDS / 4)
            finally:
                _stop_all([server])
        finally:
            _stop_all(workers)
    rows = [
        ProcessFootprint(process=name, after_start_mb=started[name], after_writes_mb=after[name])
        for name in pids
    ]
    return rows, seconds, how


# -- the install and the command line -------------------------------------------------------------------


def _site_packages(venv: Path) -> Path:
    (site,) = venv.glob("lib/python*/site-packages")
    return site


def _tree_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def measure_install() -> InstallSize:
    """A fresh virtualenv, ``pip install <checkout>`` as a user would (no editable, no
    extras), then the size of what landed in site-packages."""
    with tempfile.TemporaryDirectory(prefix="memwarden-footprint-") as scratch:
        venv, source = Path(scratch) / "venv", Path(scratch) / "source"
        # A copy: a build writes build/ and *.egg-info beside the sources, never in the checkout.
        shutil.copytree(
            CHECKOUT,
            source,
            ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build", ".*_cache"),
        )
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # noqa: S603
        began = time.perf_counter()
        subprocess.run(  # noqa: S603
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(venv / "bin" / "python"),
                "install",
                "-q",
                str(source),
            ],
            check=True,
            capture_output=True,  # pip's warnings are not the bench's output
        )
        seconds = time.perf_counter() - began
        site = _site_packages(venv)
        sizes: dict[str, float] = {}
        for entry in site.iterdir():
            if entry.name.endswith((".dist-info", ".pth")) or entry.name.startswith("__"):
                continue
            name = entry.name.split(".")[0] if entry.is_file() else entry.name
            sizes[name] = sizes.get(name, 0.0) + (
                _tree_mb(entry) if entry.is_dir() else entry.stat().st_size / 1e6
            )
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:10]
        return InstallSize(
            total_mb=round(_tree_mb(site), 1),
            seconds=round(seconds, 1),
            largest=[Distribution(name=name, mb=round(mb, 1)) for name, mb in largest],
        )


def cli_seconds(argv: list[str], env: dict[str, str]) -> float:
    """The median wall time of ``memwarden ARGV`` over ``CLI_RUNS`` runs, after one that
    writes the byte-code (as an installed package has it)."""
    command = [sys.executable, "-m", "memwarden.api.cli.main", *argv]
    env = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(command, env=env, check=True, capture_output=True)  # noqa: S603
    times = []
    for _ in range(CLI_RUNS):
        began = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True)  # noqa: S603
        times.append(time.perf_counter() - began)
    return round(statistics.median(times), 3)


# -- the command ----------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> FootprintReport:
    before = machine_now()
    with (
        scratch_database("memwarden_bench_footprint") as (scratch, _params),
        Runtime(msgspec.structs.replace(scratch, pool_size=4), follow=False) as runtime,
    ):
        processes, write_seconds, worker = measure_processes(scratch, runtime, args.writes)
        env = _environment(scratch, 4)
        help_seconds = cli_seconds(["--help"], env)
        keys_seconds = cli_seconds(["keys", "list"], env)
    install = None if args.no_install else measure_install()
    return FootprintReport(
        writes=args.writes,
        write_seconds=round(write_seconds, 1),
        processes=processes,
        after_start_mb=round(sum(p.after_start_mb for p in processes), 1),
        after_writes_mb=round(sum(p.after_writes_mb for p in processes), 1),
        target_mb=TARGET_MB,
        worker=worker,
        install=install,
        help_seconds=help_seconds,
        keys_list_seconds=keys_seconds,
        machine=before,
        command=invocation("footprint"),
    )


def run_footprint_bench(args: argparse.Namespace) -> int:
    report = measure(args)
    sys.stdout.write((msgspec.json.encode(report).decode() if args.json else text(report)) + "\n")
    return 0 if report.ok else 1


def text(report: FootprintReport) -> str:
    lines = [
        f"footprint ({report.machine.describe()}; {report.worker})",
        f"  {'process':12} {'after start':>12} {f'after {report.writes} writes':>20}",
        *(
            f"  {p.process:12} {p.after_start_mb:>9.0f} MB {p.after_writes_mb:>17.0f} MB"
            for p in report.processes
        ),
        f"  {'together':12} {report.after_start_mb:>9.0f} MB {report.after_writes_mb:>17.0f} MB"
        f"   (target {report.target_mb:.0f} MB: {'met' if report.ok else 'MISSED'})",
        f"  writes: {report.writes} in {report.write_seconds:.1f}s over HTTP (write_batch of {BATCH})",
        f"  memwarden --help {report.help_seconds:.2f}s, keys list {report.keys_list_seconds:.2f}s"
        f" (median of {CLI_RUNS})",
    ]
    if report.install is not None:
        largest = ", ".join(f"{d.name} {d.mb:.0f}" for d in report.install.largest)
        lines.append(
            f"  pip install . : {report.install.total_mb:.0f} MB in site-packages; largest (MB): {largest}"
        )
    return "\n".join(lines)
