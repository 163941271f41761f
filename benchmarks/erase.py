"""`memwarden bench erase`: time to erase 1, 100 and 10,000 memories (by ids and by
subject) in a store of N (default 100,000), and what an erasure does to the latency of
a concurrent writer (p50/p95 of writes overlapping erasures vs writes without).

The store is generated with batched ledger appends (a MemoryWritten and a data key per
memory, 1,000 memories per append), then projected; every erasure goes through the
real ``forget`` path: lookup, ledger state, decider, signed certificate, one append that
also destroys the keys.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from uuid import UUID, uuid4

import msgspec

from benchmarks.common import percentile, scratch_database
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.events import AuditRecorded, MemoryWritten, Provenance
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import tenant_of
from memwarden.domain.services.commands import utcnow

SIZES = (1, 100, 10_000)
NAMESPACE = "bench/erase"
OPERATOR = Identity(NAMESPACE, "bench-admin", "admin")
APPEND_BATCH = 1_000


class EraseRow(msgspec.Struct, frozen=True):
    by: str
    size: int
    erased: int
    seconds: float
    certificate_valid: bool


class LatencyRow(msgspec.Struct, frozen=True):
    label: str
    writes: int
    p50_ms: float
    p95_ms: float
    max_ms: float


def _generate(runtime: Runtime, store: int) -> dict[str, list[UUID]]:
    """The store: subject groups of 1, 100 and 10,000 memories, the rest ordinary facts.
    Returns the ids of each group ('plain' holds the ones erased by id)."""
    groups: dict[str, list[UUID]] = {f"subject-{n}": [] for n in SIZES}
    groups["plain"] = []
    plan = [f"subject-{n}" for n in SIZES for _ in range(n)]
    plan += ["plain"] * max(0, store - len(plan))
    ledger = runtime.ledger
    now = utcnow()
    for start in range(0, len(plan), APPEND_BATCH):
        events: list[Recorded] = []
        keys = []
        for offset, group in enumerate(plan[start : start + APPEND_BATCH]):
            n = start + offset
            memory_id = uuid4()
            keys.append(ledger.new_data_key(memory_id))
            person = group.replace("subject-", "person") if group != "plain" else f"p{n}"
            written = MemoryWritten(
                memory_id=memory_id,
                namespace=f"{NAMESPACE}/team{n % 10}",
                actor="bench-writer",
                type="fact",
                scope="team",
                content=f"Fact {n}: {person} handles case {n} of the ingest pipeline",
                subject=person,
                attribute=f"case{n}",
                value=f"case {n}",
                selectors=(f"stakeholder:{person}",),
                provenance=(Provenance(source="conversation", actor="bench-writer"),),
                valid_from=now,
                status="active",
                trust_tier="canonical",
                classification=Classification(),
                at=now,
            )
            events.append(Recorded(memory_id, 1, written))
            groups[group].append(memory_id)
        audit = AuditRecorded(
            record_id=uuid4(),
            actor="bench",
            namespace=NAMESPACE,
            role="owner",
            op="bench.seed",
            outcome="ok",
            detail=f"{len(events)} memories",
            at=now,
        )
        ledger.append([*events, Recorded(audit.record_id, 1, audit)], keys, tenant=tenant_of(NAMESPACE))
    return groups


class Writer:
    """A concurrent writer in another namespace, timing every write."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.samples: list[tuple[float, float]] = []  # (start, end)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        identity = Identity("bench/writer", "writer", "agent")
        n = 0
        while not self._stop.is_set():
            began = time.perf_counter()
            self.runtime.memory.write(
                identity, WriteMemory(content=f"The search service answered ticket {n} within budget")
            )
            self.samples.append((began, time.perf_counter()))
            n += 1

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _latency(label: str, samples: list[tuple[float, float]]) -> LatencyRow:
    values = [(end - start) * 1000 for start, end in samples]
    return LatencyRow(
        label=label,
        writes=len(values),
        p50_ms=round(percentile(values, 0.5), 3),
        p95_ms=round(percentile(values, 0.95), 3),
        max_ms=round(max(values, default=float("nan")), 3),
    )


def run_erase_bench(args: argparse.Namespace) -> int:
    rows: list[EraseRow] = []
    with scratch_database("memwarden_bench_erase") as (scratch, _params):
        settings = msgspec.structs.replace(scratch, pool_size=8, read_wait_seconds=600.0)
        with Runtime(settings, follow=False) as runtime:
            began = time.perf_counter()
            groups = _generate(runtime, args.store)
            generated = time.perf_counter() - began
            began = time.perf_counter()
            runtime.reads.runner.catch_up()
            projected = time.perf_counter() - began
            runtime.reads.runner.start()

            writer = Writer(runtime)
            writer.start()
            time.sleep(args.baseline_seconds)
            baseline_end = time.perf_counter()
            windows: list[tuple[float, float]] = []
            plain = groups["plain"]
            taken = 0
            for size in SIZES:
                for by in ("ids", "subject"):
                    if by == "ids":
                        command = Forget(ids=tuple(plain[taken : taken + size]), reason="bench")
                        taken += size
                    else:
                        command = Forget(subject=f"stakeholder:person{size}", reason="bench")
                    runtime.reads.wait_for(runtime.ledger.head_position())
                    time.sleep(0.5)
                    start = time.perf_counter()
                    result = runtime.core.erasure.forget(OPERATOR, command)
                    end = time.perf_counter()
                    windows.append((start, end))
                    valid = runtime.ledger.verify_certificate(result.certificate).valid
                    rows.append(EraseRow(by, size, result.erased, round(end - start, 3), valid))
            time.sleep(0.5)
            writer.stop()
            chain = runtime.ledger.verify()
    samples = writer.samples
    baseline = [s for s in samples if s[1] <= baseline_end]
    during = [s for s in samples if any(s[0] < w_end and s[1] > w_start for w_start, w_end in windows)]
    latency = [
        _latency("writes without erasure", baseline),
        _latency("writes overlapping an erasure", during),
    ]
    ok = chain.ok and all(r.certificate_valid and r.erased == r.size for r in rows)
    _report(args, rows, latency, chain.ok, chain.checked, generated, projected)
    return 0 if ok else 1


def _report(
    args: argparse.Namespace,
    rows: list[EraseRow],
    latency: list[LatencyRow],
    chain_ok: bool,
    checked: int,
    generated: float,
    projected: float,
) -> None:
    if args.json:
        sys.stdout.write(
            msgspec.json.encode(
                {
                    "store": args.store,
                    "generate_s": round(generated, 1),
                    "project_s": round(projected, 1),
                    "erase": rows,
                    "latency": latency,
                    "chain_ok": chain_ok,
                }
            ).decode()
            + "\n"
        )
    else:
        out = sys.stdout.write
        out(
            f"memwarden bench erase — store of {args.store:,} memories (generated in {generated:.1f} s,"
            f" projected in {projected:.1f} s)\n"
        )
        out("reference: erasure is one ledger append; its cost grows with the number of erased memories\n")
        out(f"{'by':>8} {'size':>7} {'erased':>7} {'seconds':>9} {'per memory ms':>14}  certificate\n")
        for r in rows:
            per = r.seconds / max(1, r.erased) * 1000
            out(
                f"{r.by:>8} {r.size:>7} {r.erased:>7} {r.seconds:>9.3f} {per:>14.3f}  "
                f"{'verifies' if r.certificate_valid else 'INVALID'}\n"
            )
        out("concurrent writer (bench/writer, one thread):\n")
        for row in latency:
            out(
                f"  {row.label:32} n={row.writes:>6}  p50 {row.p50_ms:8.3f} ms  p95 {row.p95_ms:8.3f} ms"
                f"  max {row.max_ms:9.3f} ms\n"
            )
        out(f"ledger after the run: {checked} events, chain {'verifies' if chain_ok else 'BROKEN'}\n")
