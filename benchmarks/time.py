"""`memwarden bench time`: time travel and rebuilds on a large generated ledger.

1. Generate a ledger of N events (default 1,000,000) through the real ledger (sealed,
   hash-chained, group-committed appends of a few thousand events each): writes across
   50 namespaces, successions and corrections, verifications, an audit record per write.
2. Project it (the live runner), then time as-of queries by SQL (p50/p95, random instants,
   random callers), and the same as-of answer by replay, without and with snapshots.
3. The full rebuild rate of ``memory_objects`` (events/s) next to the raw rate of reading
   the notification log without processing, measured in the same run.

Targets: as-of by SQL p95 < 50 ms; rebuild >= 30% of the raw read rate.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4

import msgspec

from benchmarks.common import percentile, scratch_database
from memwarden.api.cli.progress import ProgressBar, staged_progress
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.events import (
    AuditRecorded,
    Event,
    MemorySuperseded,
    MemoryVerified,
    MemoryWritten,
    Provenance,
)
from memwarden.domain.model.namespaces import ancestors
from memwarden.projections.rebuild import Rebuilder
from memwarden.projections.timeline.service import AsOfQuestion, TimeTravel

SQL_P95_TARGET_MS = 50.0
REBUILD_TARGET = 0.30
GENERATOR_TENANT = "/bench-time"
NAMESPACES = tuple(f"bench{t}/team{n}" for t in range(5) for n in range(10))
START = datetime(2025, 1, 1, tzinfo=UTC)


class TimeBench(msgspec.Struct, kw_only=True):
    events: int
    memories: int
    generate_seconds: float
    generate_events_per_second: float
    project_seconds: float
    asof_sql_queries: int
    asof_sql_p50_ms: float
    asof_sql_p95_ms: float
    asof_sql_target_ms: float = SQL_P95_TARGET_MS
    asof_answer_memories: int
    replay_without_snapshots_seconds: float
    snapshot_every: int
    snapshots_seconds: float
    snapshots_mb: float
    replay_with_snapshots_seconds: float
    replay_events_read_with_snapshots: int
    replay_agrees_with_sql: bool
    raw_read_events_per_second: float
    rebuild_events_per_second: float
    rebuild_ratio: float
    rebuild_target: float = REBUILD_TARGET


class Generator:
    """Synthetic but realistic memory histories, appended in big atomic groups."""

    def __init__(self, runtime: Runtime, seed: int = 7) -> None:
        self.ledger = runtime.ledger
        self.rng = random.Random(seed)  # noqa: S311 - reproducible data, not secrets
        self.versions: dict[UUID, int] = {}
        self.live: dict[str, list[UUID]] = {ns: [] for ns in NAMESPACES}
        self.at = START
        self.memories = 0
        self.events = 0

    def _recorded(self, event: Event) -> Recorded:
        stream = event.stream_id
        version = self.versions.get(stream, 0) + 1
        self.versions[stream] = version
        return Recorded(stream, version, event)

    def unit(self) -> tuple[list[Recorded], NewMemoryKey]:
        """One write: the memory, maybe a supersedence or a verification, and the audit record."""
        rng = self.rng
        self.at += timedelta(milliseconds=rng.randint(1, 40))
        namespace = rng.choice(NAMESPACES)
        memory_id = uuid4()
        n = self.memories
        valid_from = self.at - timedelta(days=rng.randint(0, 400))
        written = MemoryWritten(
            memory_id=memory_id,
            namespace=namespace,
            actor=f"agent-{n % 17}",
            type="fact",
            scope="team",
            content=f"Service {n % 997} of {namespace} is owned by team {n % 31} since release {n}",
            provenance=(Provenance(source="conversation", actor=f"agent-{n % 17}"),),
            valid_from=valid_from,
            status="active",
            trust_tier="canonical",
            classification=Classification(),
            at=self.at,
        )
        events: list[Event] = [written]
        pool = self.live[namespace]
        roll = rng.random()
        if pool and roll < 0.25:
            old = pool.pop(rng.randrange(len(pool)))
            succession = roll < 0.15
            events.append(
                MemorySuperseded(
                    memory_id=old,
                    by=memory_id,
                    kind="succession" if succession else "correction",
                    reason="slot",
                    valid_to=valid_from if succession else None,
                    at=self.at,
                )
            )
        elif pool and roll < 0.35:
            events.append(
                MemoryVerified(
                    memory_id=rng.choice(pool),
                    actor="verifier",
                    supports=True,
                    trust_tier="verified",
                    at=self.at,
                )
            )
        pool.append(memory_id)
        if len(pool) > 2000:
            pool.pop(0)
        events.append(
            AuditRecorded(
                record_id=uuid4(),
                actor=written.actor,
                namespace=namespace,
                role="agent",
                op="write",
                outcome="ok",
                detail="stored",
                subject_ids=(memory_id,),
                at=self.at,
            )
        )
        self.memories += 1
        return [self._recorded(e) for e in events], self.ledger.new_data_key(memory_id)

    def run(self, target: int, group: int = 3000, report: bool = True) -> None:
        bar = ProgressBar("generate", target, unit=" ev/s") if report else None
        while self.events < target:
            batch: list[Recorded] = []
            keys: list[NewMemoryKey] = []
            while len(batch) < group and self.events + len(batch) < target:
                events, key = self.unit()
                batch += events
                keys.append(key)
            # one generator: its batches span the bench tenants, so they go on one chain
            self.ledger.append(batch, keys, tenant=GENERATOR_TENANT)
            self.events += len(batch)
            if bar is not None:
                bar.update(self.events)


def _sql_latencies(
    travel: TimeTravel, end: datetime, rng: random.Random, queries: int
) -> tuple[list[float], list[int]]:
    """As-of by SQL: random instants, random callers (half with a valid time), a page of 100."""
    latencies: list[float] = []
    sizes: list[int] = []
    for _ in range(queries):
        as_of = START + (end - START) * rng.random()
        valid_at = as_of - timedelta(days=rng.randint(0, 200)) if rng.random() < 0.5 else None
        question = AsOfQuestion(
            scope=ancestors(rng.choice(NAMESPACES)), as_of=as_of, valid_at=valid_at, limit=100
        )
        t0 = time.perf_counter()
        answer = travel.sql(question)
        latencies.append(time.perf_counter() - t0)
        sizes.append(len(answer.memories))
    return latencies, sizes


def _raw_read_rate(runtime: Runtime) -> float:
    """Events a second of a plain read of the whole notification log (the rebuild's reference)."""
    began = time.perf_counter()
    position, read = 0, 0
    while True:
        batch = runtime.ledger.read(position, 5000)
        if not batch:
            break
        read += len(batch)
        position = int(batch[-1].position or 0)
    return read / (time.perf_counter() - began)


def run_time_bench(args: argparse.Namespace) -> int:
    total = int(args.events)
    with (
        scratch_database("memwarden_bench_time") as (settings, _params),
        Runtime(settings, follow=False) as runtime,
    ):
        generator = Generator(runtime)
        began = time.perf_counter()
        generator.run(total)
        generate_seconds = time.perf_counter() - began
        events = runtime.ledger.head_position()
        sys.stderr.write("projecting...\n")
        began = time.perf_counter()
        runtime.reads.runner.catch_up()
        project_seconds = time.perf_counter() - began
        travel = runtime.reads.time_travel
        end = generator.at
        rng = random.Random(11)  # noqa: S311

        latencies, sizes = _sql_latencies(travel, end, rng, int(args.queries))

        # the same answer by replay: late in the history, so a replay reads almost all of it
        question = AsOfQuestion(scope=ancestors(NAMESPACES[3]), as_of=START + (end - START) * 0.9)
        sql_answer = travel.sql(question)
        t0 = time.perf_counter()
        plain = travel.replay(question, snapshots=False)
        replay_plain = time.perf_counter() - t0
        sys.stderr.write(f"replay without snapshots: {replay_plain:.1f}s\n")
        t0 = time.perf_counter()
        travel.replayer.take_snapshots(int(args.snapshot_every))
        snapshots_seconds = time.perf_counter() - t0
        snapshots_mb = sum(size for *_, size in travel.replayer.snapshots()) / 1e6
        t0 = time.perf_counter()
        snapped = travel.replay(question, snapshots=True)
        replay_snapped = time.perf_counter() - t0
        snapped_read = travel.replayer.last.events_read
        agrees = sql_answer.memories == plain.memories == snapped.memories
        agrees = agrees and sql_answer.position == plain.position == snapped.position

        # raw read of the notification log, then the full rebuild of memory_objects
        raw_rate = _raw_read_rate(runtime)
        report = Rebuilder(runtime.reads.runner).rebuild(
            "memory_objects", progress=staged_progress("rebuild")
        )
        result = TimeBench(
            events=events,
            memories=generator.memories,
            generate_seconds=round(generate_seconds, 1),
            generate_events_per_second=round(events / generate_seconds),
            project_seconds=round(project_seconds, 1),
            asof_sql_queries=len(latencies),
            asof_sql_p50_ms=round(percentile(latencies, 0.5) * 1000, 2),
            asof_sql_p95_ms=round(percentile(latencies, 0.95) * 1000, 2),
            asof_answer_memories=round(sum(sizes) / max(len(sizes), 1)),
            replay_without_snapshots_seconds=round(replay_plain, 2),
            snapshot_every=int(args.snapshot_every),
            snapshots_seconds=round(snapshots_seconds, 1),
            snapshots_mb=round(snapshots_mb, 1),
            replay_with_snapshots_seconds=round(replay_snapped, 2),
            replay_events_read_with_snapshots=snapped_read,
            replay_agrees_with_sql=agrees,
            raw_read_events_per_second=round(raw_rate),
            rebuild_events_per_second=round(report.events_per_second),
            rebuild_ratio=round(report.events_per_second / raw_rate, 3),
        )
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        sys.stdout.write(_text(result) + "\n")
    ok = (
        result.replay_agrees_with_sql
        and result.asof_sql_p95_ms < SQL_P95_TARGET_MS
        and result.rebuild_ratio >= REBUILD_TARGET
    )
    return 0 if ok else 1


def _text(r: TimeBench) -> str:
    return "\n".join(
        [
            f"ledger: {r.events:,} events ({r.memories:,} memories) generated in {r.generate_seconds}s"
            f" ({r.generate_events_per_second:,} ev/s); projected in {r.project_seconds}s",
            f"as-of by SQL: p50 {r.asof_sql_p50_ms} ms, p95 {r.asof_sql_p95_ms} ms over {r.asof_sql_queries}"
            f" queries (page of 100, avg {r.asof_answer_memories} returned)   [target p95 < {r.asof_sql_target_ms} ms]",
            f"same answer by replay: {r.replay_without_snapshots_seconds}s from position zero;"
            f" {r.replay_with_snapshots_seconds}s from a snapshot ({r.replay_events_read_with_snapshots:,} events"
            f" folded; snapshots every {r.snapshot_every:,} took {r.snapshots_seconds}s, {r.snapshots_mb} MB)",
            f"replay agrees with SQL: {r.replay_agrees_with_sql}",
            f"raw read of the notification log: {r.raw_read_events_per_second:,} ev/s;"
            f" rebuild of memory_objects: {r.rebuild_events_per_second:,} ev/s"
            f" = {r.rebuild_ratio:.0%} of raw   [target >= {r.rebuild_target:.0%}]",
        ]
    )
