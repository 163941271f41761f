"""`memwarden bench review`: what a reviewer faces after a realistic import, and how fast
the queue answers.

1. Import N statements (``benchmarks.review_corpus``: framed facts, later updates, and many
   same-frame records that are not contradictions) through the real write path, four agents
   of one namespace under the default dial, each write judged by the autopilot's pass.
2. Score what reached people: findings per 100 writes, findings naming one statement (max
   and mean), and the findings' precision against the corpus's own truth (a true
   contradiction says another value of the same subject in the same frame); updates caught
   (a finding, a decision or a supersedence between an update and what it contradicts).
3. Grow the queue to ``--open`` open findings (FindingOpened events appended through the
   ledger over pairs of the imported memories, projected like any other), serve the API and
   time a reviewer's queue page over HTTP: the first page newest first, a deep page by
   cursor, and a filtered page, p50 / p95 (target p95 < 50 ms).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from uuid import UUID, uuid4

import msgspec

from benchmarks.api import HttpClient, _free_port, _serve
from benchmarks.common import deployment_env, percentile, scratch_database
from benchmarks.judge import load_pairs, measure, part_of
from benchmarks.review_corpus import Statement, contradicts, statements
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.events import FindingOpened
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.judging import RulesJudge
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.settings import Settings
from memwarden.projections.listing import ListQuery, every
from memwarden.projections.runner import ProjectionLag

NAMESPACE = "benchreview/eng"
OPERATOR = Identity("benchreview", "operator@bench", "owner")
AGENTS = tuple(Identity(NAMESPACE, f"agent-{n}", "agent") for n in range(4))
PAGE_P95_TARGET_MS = 50.0
HOLDER = "bench-review"
BATCH = 500


class ReviewBench(msgspec.Struct, kw_only=True):
    statements: int
    outcomes: dict[str, int]
    import_seconds: float
    findings: int
    findings_per_100_writes: float
    findings_true: int
    finding_precision: float
    findings_per_statement_max: int
    findings_per_statement_mean: float
    decisions: int
    updates: int
    updates_caught: int
    judge_table_precision: float
    judge_table_recall: float
    """The rules judge on the labelled table (``bench judge``), its held-out part."""
    open_findings_timed: int
    page_first_p50_ms: float
    page_first_p95_ms: float
    page_deep_p50_ms: float
    page_deep_p95_ms: float
    page_filtered_p50_ms: float
    page_filtered_p95_ms: float
    page_p95_target_ms: float = PAGE_P95_TARGET_MS
    load_average: tuple[float, float, float]


def run_review_bench(args: argparse.Namespace) -> int:
    corpus = list(statements(int(args.statements)))
    with scratch_database("memwarden_bench_review") as (settings, _params):
        with Runtime(settings) as runtime:
            began = time.perf_counter()
            written, outcomes = _import(runtime, corpus)
            import_seconds = time.perf_counter() - began
            _settle(runtime)
            scored = _score(runtime, corpus, written)
            sys.stderr.write(f"growing the queue to {args.open} open findings...\n")
            _grow_queue(runtime, list(written), int(args.open))
            _settle(runtime)
            reviewer = runtime.core.governance.issue_key(
                OPERATOR, IssueKey(target="benchreview", actor="rita", role="admin")
            ).key
        timed = _time_pages(settings, reviewer, int(args.requests))
    result = msgspec.convert(
        {
            "statements": len(corpus),
            "outcomes": dict(outcomes),
            "import_seconds": round(import_seconds, 1),
            **_judge_table(),
            **scored,
            **timed,
            "load_average": os.getloadavg(),
        },
        ReviewBench,
    )
    sys.stdout.write((msgspec.json.encode(result).decode() if args.json else _text(result)) + "\n")
    return 0 if max(result.page_first_p95_ms, result.page_deep_p95_ms) < PAGE_P95_TARGET_MS else 1


def _judge_table() -> dict[str, float]:
    held_out = measure(RulesJudge(), part_of(load_pairs(), "held_out"), "held_out").overall
    return {
        "judge_table_precision": round(held_out.precision or 0.0, 3),
        "judge_table_recall": round(held_out.recall or 0.0, 3),
    }


def _settle(runtime: Runtime) -> None:
    """Wait, however long projecting takes, until the read models hold the whole ledger."""
    head = runtime.ledger.head_position()
    while True:
        try:
            runtime.reads.wait_for(head)
            return
        except ProjectionLag:
            continue


def _import(runtime: Runtime, corpus: list[Statement]) -> tuple[dict[UUID, int], Counter[str]]:
    """Write every statement (agents in turn) and judge each stored one: memory id -> index."""
    written: dict[UUID, int] = {}
    outcomes: Counter[str] = Counter()
    claim = ProvenanceClaim(source="conversation")
    for index, said in enumerate(corpus):
        try:
            result = runtime.memory.write(
                AGENTS[index % len(AGENTS)], WriteMemory(content=said.text, provenance=claim)
            )
        except DomainError as refused:
            outcomes[f"refused:{refused.code}"] += 1
            continue
        outcomes[result.outcome] += 1
        if result.id is None:
            continue
        written[result.id] = index
        if result.outcome == "stored":
            runtime.autopilot.judge_memory(result.id, result.position, HOLDER)
        if index % 250 == 249:
            sys.stderr.write(f"  {index + 1} written\n")
    return written, outcomes


def _score(runtime: Runtime, corpus: list[Statement], written: dict[UUID, int]) -> dict[str, float | int]:
    reads = runtime.reads
    findings = list(every(lambda q: reads.findings(OPERATOR, q), ListQuery(limit=500)))
    decisions = list(every(lambda q: reads.decisions(OPERATOR, q), ListQuery(limit=500)))
    pairs = [(f.memory_a, f.memory_b) for f in findings]
    true = sum(
        1
        for a, b in pairs
        if a in written and b in written and contradicts(corpus[written[a]], corpus[written[b]])
    )
    named = Counter(m for pair in pairs for m in pair)
    settled = {(d.winner, d.loser) for d in decisions} | set(pairs)
    caught = _updates_caught(runtime, corpus, written, settled)
    writes = len(written)
    return {
        "findings": len(findings),
        "findings_per_100_writes": round(100 * len(findings) / max(1, writes), 2),
        "findings_true": true,
        "finding_precision": round(true / len(findings), 3) if findings else 1.0,
        "findings_per_statement_max": max(named.values(), default=0),
        "findings_per_statement_mean": round(sum(named.values()) / len(named), 2) if named else 0.0,
        "decisions": len(decisions),
        "updates": sum(1 for s in corpus if s.update),
        "updates_caught": caught,
    }


def _updates_caught(
    runtime: Runtime, corpus: list[Statement], written: dict[UUID, int], settled: set[tuple[UUID, UUID]]
) -> int:
    """Updates put against what they contradict: by a finding or decision, or by the write
    itself (the older statement superseded)."""
    touched = {m for pair in settled for m in pair}
    caught = 0
    for memory_id, index in written.items():
        if not corpus[index].update:
            continue
        found = runtime.reads.read(OPERATOR, memory_id)
        if memory_id in touched or (found is not None and found.supersedes):
            caught += 1
    return caught


def _grow_queue(runtime: Runtime, memories: list[UUID], target: int) -> None:
    """Open findings over pairs of the imported memories until ``target`` are open."""
    rng = random.Random(50)  # noqa: S311 - reproducible pairs, not secrets
    have = runtime.reads.findings(OPERATOR, ListQuery(limit=1)).count
    while have < target:
        batch = min(BATCH, target - have)
        events = []
        for _ in range(batch):
            a, b = rng.sample(memories, 2)
            finding = FindingOpened(
                finding_id=uuid4(),
                namespace=NAMESPACE,
                memory_a=a,
                memory_b=b,
                judge="rules",
                rule="bench",
                explanation="a generated finding: the queue's size, not its truth, is measured",
                cosine=0.8,
                at=datetime.now(UTC),
            )
            events.append(Recorded(finding.finding_id, 1, finding))
        runtime.ledger.append(events, tenant="benchreview")
        have += batch


def _time_pages(settings: Settings, key: str, requests: int) -> dict[str, float | int]:
    env = deployment_env(settings)
    port = _free_port()
    server = _serve(env, port, 1)
    client = HttpClient(port, key)
    try:
        status, body = client.call("GET", "/v1/admin/findings?limit=1")
        assert status == 200, body
        count = int(msgspec.json.decode(body)["count"])
        deep = _cursor_at(client, count // 2)
        shapes = {
            "first": "/v1/admin/findings?limit=50&order=newest",
            "deep": f"/v1/admin/findings?limit=50&cursor={deep}",
            "filtered": f"/v1/admin/findings?limit=50&order=newest&writer={AGENTS[1].actor}",
        }
        figures: dict[str, float | int] = {"open_findings_timed": count}
        for name, path in shapes.items():
            times = _timed(client, path, requests)
            figures[f"page_{name}_p50_ms"] = round(percentile(times, 0.5), 2)
            figures[f"page_{name}_p95_ms"] = round(percentile(times, 0.95), 2)
        return figures
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)


def _cursor_at(client: HttpClient, depth: int) -> str:
    """The cursor of the page that starts about ``depth`` items into the oldest-first walk."""
    cursor = ""
    for _ in range(max(1, depth // 500)):
        status, body = client.call("GET", f"/v1/admin/findings?limit=500{cursor}")
        assert status == 200, body
        page = msgspec.json.decode(body)
        if page["cursor"] is None:
            break
        cursor = f"&cursor={page['cursor']}"
    return cursor.removeprefix("&cursor=")


def _timed(client: HttpClient, path: str, requests: int) -> list[float]:
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        status, body = client.call("GET", path)
        times.append((time.perf_counter() - began) * 1000)
        assert status == 200, body
    return times


def _text(result: ReviewBench) -> str:
    return "\n".join(
        [
            f"imported {result.statements} statements in {result.import_seconds} s: {result.outcomes}",
            f"findings {result.findings} ({result.findings_per_100_writes} per 100 writes),"
            f" precision {result.finding_precision} ({result.findings_true} true)",
            f"findings naming one statement: max {result.findings_per_statement_max},"
            f" mean {result.findings_per_statement_mean}; automatic decisions {result.decisions}",
            f"updates caught {result.updates_caught} of {result.updates}",
            f"the rules judge on the labelled table's held-out part: precision {result.judge_table_precision},"
            f" recall {result.judge_table_recall}",
            f"queue page at {result.open_findings_timed} open findings (target p95 < {result.page_p95_target_ms} ms):",
            f"  first page newest first  p50 {result.page_first_p50_ms} ms  p95 {result.page_first_p95_ms} ms",
            f"  a deep page by cursor    p50 {result.page_deep_p50_ms} ms  p95 {result.page_deep_p95_ms} ms",
            f"  filtered by writer       p50 {result.page_filtered_p50_ms} ms  p95 {result.page_filtered_p95_ms} ms",
            f"load average {', '.join(f'{x:.2f}' for x in result.load_average)}",
        ]
    )
