"""`memwarden bench ingest`: LoCoMo turns (each turn's text) through ``write_batch`` over
HTTP, next to the embedder's own best batch throughput on the same texts and the plain
ledger, in the same run. Target: ingest at least 75% of the embedder's own rate.

- **embedder alone**: the configured embedder (``MEMWARDEN_EMBEDDER``, default MiniLM),
  unwrapped from its cache and batcher, in-process, on the texts sorted by length and
  cut into batches; the best of a few batch sizes, measured before and after the ingest
  runs (the faster of the two counts).
- **ingest**: a real ``memwarden serve`` on a random port (a scratch database, a temporary
  data directory), ``--clients`` clients posting ``write_batch`` requests of ``--batch``
  turns each; memories/s from the first request to the last answer.
- **plain ledger**: the same over HTTP with ``MEMWARDEN_EMBEDDER=none`` (a second server).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec

from benchmarks.api import _free_port, _serve
from benchmarks.common import bare, deployment_env, scratch_database
from benchmarks.cpu import CpuPerOperation, Snapshot, cpu_ticks, per_operation, ticks_used
from benchmarks.locomo import DEFAULT_DATA
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import Embedder, embedder_from_settings
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings

TARGET = 0.75
TENANT = "benchingest"
BATCH_SIZES = (16, 32, 64, 128, 256)
"""Length-sorted batch sizes the embedder alone is tried with: the larger ones let its
inference sessions work on several of its own (even) batches at once."""
SAMPLE_FOR_BATCH_SIZE = 1024
"""Texts the batch sizes are compared on before the best one embeds them all."""
_SESSION = re.compile(r"session_\d+")


class EmbedderRun(msgspec.Struct, frozen=True, kw_only=True):
    model: str
    batch: int
    texts: int
    seconds: float
    per_second: float
    cpu_us: float
    """CPU per text of this process (the model's threads included), in microseconds."""


class IngestRun(msgspec.Struct, frozen=True, kw_only=True):
    label: str
    embedder: str
    clients: int
    batch: int
    memories: int
    seconds: float
    """From the first request until every read model has projected the last write (what
    was ingested is searchable): the rate counts the projector's work too."""
    per_second: float
    accepted_seconds: float
    """From the first request to the last answer."""
    outcomes: dict[str, int]
    cpu: CpuPerOperation | None
    """CPU per memory by process over ``seconds``."""


class IngestReport(msgspec.Struct, frozen=True, kw_only=True):
    turns: int
    embedder_alone: EmbedderRun | None
    ingest: IngestRun
    plain_ledger: IngestRun
    ratio: float | None
    """ingest / embedder alone."""
    target: float


def turn_texts(path: Path) -> list[str]:
    """The text of every turn of every conversation, in order (empty ones left out)."""
    samples = msgspec.json.decode(path.read_bytes(), type=list[dict[str, Any]])
    texts: list[str] = []
    for sample in samples:
        conversation = sample.get("conversation") or {}
        for key in sorted(conversation, key=_session_number):
            if _SESSION.fullmatch(key) and isinstance(conversation[key], list):
                texts.extend(str(t.get("text") or "") for t in conversation[key] if isinstance(t, dict))
    return [t for t in texts if t.strip()]


def _session_number(key: str) -> int:
    return int(key.rpartition("_")[2]) if _SESSION.fullmatch(key) else 0


# -- the embedder alone ----------------------------------------------------------------------------


def length_sorted_batches(texts: Sequence[str], size: int) -> Iterator[list[str]]:
    ordered = sorted(texts, key=len)
    for start in range(0, len(ordered), size):
        yield ordered[start : start + size]


def embed_rate(embedder: Embedder, texts: Sequence[str], size: int) -> float:
    began = time.perf_counter()
    for batch in length_sorted_batches(texts, size):
        embedder.embed(batch)
    return len(texts) / max(time.perf_counter() - began, 1e-9)


def embedder_alone(texts: Sequence[str], settings: Settings) -> EmbedderRun | None:
    """The configured model's rate on ``texts`` with the best of ``BATCH_SIZES``."""
    configured = embedder_from_settings(settings)
    if configured is None:
        return None
    model = bare(configured)
    model.embed(list(texts[:32]))  # warm-up: the first call loads and plans
    sample = list(texts[:: max(1, len(texts) // SAMPLE_FOR_BATCH_SIZE)])
    best = max(BATCH_SIZES, key=lambda size: embed_rate(model, sample, size))
    began, cpu_began = time.perf_counter(), time.process_time()
    for batch in length_sorted_batches(texts, best):
        model.embed(batch)
    seconds = time.perf_counter() - began
    cpu_us = (time.process_time() - cpu_began) * 1e6 / len(texts)
    return EmbedderRun(
        model=configured.model_id,
        batch=best,
        texts=len(texts),
        seconds=round(seconds, 3),
        per_second=round(len(texts) / seconds, 1),
        cpu_us=round(cpu_us, 1),
    )


def faster(first: EmbedderRun | None, second: EmbedderRun | None) -> EmbedderRun | None:
    """The embedder's best: it is measured before and after the ingest, so a machine that
    slows down meanwhile cannot flatter the ratio."""
    runs = [run for run in (first, second) if run is not None]
    return max(runs, key=lambda run: run.per_second, default=None)


# -- ingest over HTTP --------------------------------------------------------------------------------


def _key(settings: Settings, namespace: str) -> str:
    with Runtime(settings, follow=False) as runtime:
        governance = runtime.core.governance
        operator = Identity(TENANT, "operator@bench", "owner")
        governance.set_policy(operator, TENANT, PolicyBody(rate_limit_per_minute=10_000_000))
        return governance.issue_key(operator, IssueKey(target=namespace, actor="ingest", role="agent")).key


def ingest_over_http(
    settings: Settings, texts: Sequence[str], label: str, embedder: str | None, clients: int, batch: int
) -> IngestRun:
    """Serve on a random port with ``embedder`` (None: the environment's) and post the texts."""
    namespace = f"{TENANT}/{label.replace(' ', '-')}"
    key = _key(settings, namespace)
    env = deployment_env(settings)
    if embedder is not None:
        env["MEMWARDEN_EMBEDDER"] = embedder
    port = _free_port()
    server = _serve(env, port, 1)
    try:
        base = f"http://127.0.0.1:{port}"
        ticks_before = cpu_ticks(server.pid)
        began = time.perf_counter()
        outcomes, last_position = _post_all(base, key, texts, clients, batch)
        accepted = time.perf_counter() - began
        _wait_projected(base, last_position)
        seconds = time.perf_counter() - began
        ticks_after = cpu_ticks(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
    return IngestRun(
        label=label,
        embedder=embedder or settings.embedder,
        clients=clients,
        batch=batch,
        memories=len(texts),
        seconds=round(seconds, 3),
        per_second=round(len(texts) / seconds, 1),
        accepted_seconds=round(accepted, 3),
        outcomes=dict(outcomes),
        cpu=_cpu_used(ticks_before, ticks_after, len(texts)),
    )


def _cpu_used(before: Snapshot | None, after: Snapshot | None, memories: int) -> CpuPerOperation | None:
    return per_operation(ticks_used(before, after), memories)


def _wait_projected(base: str, position: int, timeout: float = 600.0) -> None:
    """Until every projection of the server has reached ``position`` (``/readyz``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        projections = httpx.get(f"{base}/readyz", timeout=10).json().get("projections", {})
        if projections and all(p["position"] >= position for p in projections.values()):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the projections did not reach position {position} within {timeout:.0f} s")


def _post_all(
    base: str, key: str, texts: Sequence[str], clients: int, batch: int
) -> tuple[Counter[str], int]:
    """Every text once, in batches shared out to ``clients`` threads; (outcomes, the
    highest ledger position a write answered)."""
    batches = iter([list(texts[i : i + batch]) for i in range(0, len(texts), batch)])
    lock = threading.Lock()
    outcomes: Counter[str] = Counter()
    positions: list[int] = []
    failures: list[str] = []

    def client() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, headers=headers, timeout=300) as http:
            while True:
                with lock:
                    chunk = next(batches, None)
                if chunk is None or failures:
                    return
                body = {"items": [{"content": text} for text in chunk]}
                response = http.post("/v1/mem/write_batch", json=body)
                with lock:
                    if response.status_code != 200:
                        failures.append(f"{response.status_code}: {response.text[:300]}")
                        return
                    results = response.json()["results"]
                    outcomes.update(r["outcome"] for r in results)
                    positions.extend(r["position"] for r in results if r.get("position") is not None)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise RuntimeError(f"write_batch failed: {failures[0]}")
    return outcomes, max(positions, default=0)


# -- the command ---------------------------------------------------------------------------------------


def measure_ingest(texts: Sequence[str], clients: int, batch: int) -> IngestReport:
    """The embedder alone (before and after), ingest over HTTP and the plain ledger, one run."""
    configured = Settings.from_env()
    before = embedder_alone(texts, configured)
    with scratch_database("memwarden_bench_ingest") as (scratch, _), tempfile.TemporaryDirectory() as home:
        settings = msgspec.structs.replace(scratch, data_dir=Path(home))
        ingest = ingest_over_http(settings, texts, "ingest", None, clients, batch)
        plain = ingest_over_http(settings, texts, "plain ledger", "none", clients, batch)
    alone = faster(before, embedder_alone(texts, configured))
    ratio = round(ingest.per_second / alone.per_second, 3) if alone else None
    return IngestReport(
        turns=len(texts), embedder_alone=alone, ingest=ingest, plain_ledger=plain, ratio=ratio, target=TARGET
    )


def run_ingest_bench(args: argparse.Namespace) -> int:
    texts = turn_texts(Path(args.data) if args.data else DEFAULT_DATA)
    if args.limit:
        texts = texts[: args.limit]
    if not texts:
        sys.stderr.write("no turns with text in the data file\n")
        return 2
    report = measure_ingest(texts, args.clients, args.batch)
    if args.json:
        sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    else:
        sys.stdout.write(report_text(report) + "\n")
    return 0


def report_text(report: IngestReport) -> str:
    lines = [f"memwarden bench ingest — {report.turns} LoCoMo turns, same run"]
    alone = report.embedder_alone
    if alone is not None:
        lines.append(
            f"  embedder alone ({alone.model}, in-process, length-sorted batches of {alone.batch}):"
            f" {alone.per_second:.1f} memories/s, {alone.cpu_us / 1000:.1f} ms CPU a text"
        )
    for run in (report.ingest, report.plain_ledger):
        counts = ", ".join(f"{n} {o}" for o, n in sorted(run.outcomes.items()))
        lines.append(
            f"  write_batch over HTTP, embedder {run.embedder} ({run.clients} clients, {run.batch} a batch):"
            f" {run.per_second:.1f} memories/s searchable, {run.memories / run.accepted_seconds:.1f}/s"
            f" accepted ({counts})"
        )
        if run.cpu is not None:
            lines.append(
                f"    CPU a memory: {run.cpu.total / 1000:.1f} ms (API {run.cpu.api / 1000:.1f},"
                f" projector {run.cpu.projector / 1000:.1f}, PostgreSQL {run.cpu.postgres / 1000:.1f},"
                f" clients {run.cpu.bench / 1000:.1f})"
            )
    if report.ratio is not None:
        verdict = "ok" if report.ratio >= report.target else "MISSED"
        lines.append(
            f"  ingest / embedder alone: {report.ratio:.1%} (target >= {report.target:.0%}) {verdict}"
        )
    return "\n".join(lines)
