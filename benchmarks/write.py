"""`memwarden bench write`: sustained writes through the domain and the ledger (no HTTP),
next to a plain single-row INSERT+commit into a scratch table on the same server. With
``--tenants``: one chain vs a chain per tenant (api/cli/bench/chains.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import msgspec
import psycopg

from benchmarks.common import RunStats, run_threads, scratch_database
from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity

TARGETS = {1: 0.40, 16: 0.50}
SUBJECTS = ("dana", "ravi", "mei", "omar", "lena", "tom")
ATTRIBUTES = ("city", "team", "manager", "laptop", "timezone")
TOPICS = ("deploy", "billing", "search", "auth", "payments", "ingest", "alerts", "backups")


def sentence(writer: int, n: int) -> WriteMemory:
    """A distinct, realistic fact; every fifth one fills a slot (so supersedence happens)."""
    topic = TOPICS[n % len(TOPICS)]
    if n % 5 == 4:
        subject = SUBJECTS[(writer + n) % len(SUBJECTS)]
        attribute = ATTRIBUTES[n % len(ATTRIBUTES)]
        value = f"value {writer}-{n}"
        return WriteMemory(
            content=f"{subject}'s {attribute} is {value}", subject=subject, attribute=attribute, value=value
        )
    return WriteMemory(
        content=f"The {topic} service of team {writer} handles case {n} with runbook {n * 7 % 97}"
    )


class WriteBenchRow(msgspec.Struct, frozen=True):
    writers: int
    memwarden: RunStats
    plain_insert: RunStats
    ratio: float
    target: float | None


def _memwarden_worker(core: Core, writers: int) -> Callable[[int], Callable[[int], None]]:
    def make(index: int) -> Callable[[int], None]:
        identity = Identity(f"bench/w{writers}/agent{index}", f"agent-{index}", "agent")

        def work(n: int) -> None:
            result = core.memory.write(identity, sentence(index, n))
            if result.outcome == "rejected":
                raise RuntimeError(f"benchmark write rejected: {result.rejected}")

        return work

    return make


def _plain_worker(conninfo: str) -> Callable[[int], Callable[[int], None]]:
    def make(index: int) -> Callable[[int], None]:
        conn = psycopg.connect(conninfo, autocommit=True)

        def work(n: int) -> None:
            conn.execute(
                "INSERT INTO bench_scratch (writer, body) VALUES (%s, %s)",
                (index, f"The deploy service of team {index} handles case {n}"),
                prepare=True,
            )

        return work

    return make


def run_write_bench(args: argparse.Namespace) -> int:
    if getattr(args, "tenants", 0):
        from benchmarks.chains import run_chains_bench  # noqa: PLC0415 - only this mode

        return run_chains_bench(args)
    counts = [int(c) for c in str(args.writers).split(",") if c.strip()]
    rows: list[WriteBenchRow] = []
    with scratch_database("memwarden_bench_write") as (scratch, params):
        settings = msgspec.structs.replace(scratch, pool_size=max(counts) + 2)
        with psycopg.connect(params.conninfo(), autocommit=True) as conn:
            conn.execute("CREATE TABLE bench_scratch (id bigserial PRIMARY KEY, writer int, body text)")
        with open_core(settings) as core:
            for writers in counts:
                run_threads("warm-up", writers, min(1.0, args.seconds), _memwarden_worker(core, writers))
                ours = run_threads("memwarden write", writers, args.seconds, _memwarden_worker(core, writers))
                plain = run_threads(
                    "plain INSERT+commit", writers, args.seconds, _plain_worker(params.conninfo())
                )
                ratio = round(ours.per_second / plain.per_second, 3) if plain.per_second else 0.0
                rows.append(WriteBenchRow(writers, ours, plain, ratio, TARGETS.get(writers)))
            report = core.ledger.verify()
    if args.json:
        sys.stdout.write(msgspec.json.encode({"rows": rows, "chain_ok": report.ok}).decode() + "\n")
    else:
        _print_table(rows, report.ok, report.checked)
    return 0 if report.ok else 1


def _print_table(rows: list[WriteBenchRow], chain_ok: bool, events: int) -> None:
    out = sys.stdout.write
    out("memwarden bench write — domain + ledger (no HTTP) vs plain INSERT+commit, same server, same run\n")
    out(
        f"{'writers':>7} | {'memwarden w/s':>13} {'p50 ms':>8} {'p95 ms':>8} | "
        f"{'plain w/s':>10} {'p50 ms':>8} {'p95 ms':>8} | {'ratio':>6} {'target':>7}\n"
    )
    for r in rows:
        target = f">={r.target:.0%}" if r.target is not None else "-"
        verdict = "" if r.target is None else ("  ok" if r.ratio >= r.target else "  MISSED")
        out(
            f"{r.writers:>7} | {r.memwarden.per_second:>13.1f} {r.memwarden.p50_ms:>8.3f} {r.memwarden.p95_ms:>8.3f} | "
            f"{r.plain_insert.per_second:>10.1f} {r.plain_insert.p50_ms:>8.3f} {r.plain_insert.p95_ms:>8.3f} | "
            f"{r.ratio:>6.1%} {target:>7}{verdict}\n"
        )
    out(f"ledger after the run: {events} events, chain {'verifies' if chain_ok else 'BROKEN'}\n")
