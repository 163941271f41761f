"""``memwarden bench report``: runs the benches behind docs/benchmarks.md's figures and
writes them again, as PNG plots (``--images``) and a section of the Markdown (``--out``)
between ``BEGIN`` and ``END``; the rest of the file is left as it is.

- **Search** (LoCoMo, in-process, the real write and search paths; ``benchmarks/locomo.py``):
  every question searched by the lexical lane, the vector lane, the hybrid driver and the
  hybrid driver reranked at several depths, same run, same questions. Plots: the latency
  distribution of each configuration, recall by category per lane, recall against p50.
- **Ingest** (``benchmarks/ingest.py``): ``write_batch`` over HTTP against the embedder
  alone and the plain ledger, same run, same texts.
- **Footprint** (``benchmarks/footprint.py``, not with ``--quick``): RSS of serve, its
  projector and a worker, after start and after the writes.

Each figure names its same-run reference, the machine (with the load average at the start)
and the command that made it. ``--quick`` runs a few turns and questions of one conversation
and a small ingest: a smoke test of the whole path, its figures not worth reading.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from benchmarks import locomo
from benchmarks.common import percentile, scratch_database
from benchmarks.footprint import FootprintReport
from benchmarks.ingest import IngestReport, measure_ingest, turn_texts
from benchmarks.machine import Machine, invocation, machine_now
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding.rerank import reranker_from_settings
from memwarden.domain.settings import Settings
from memwarden.projections.search.drivers import RERANK_DEPTH, HybridDriver
from memwarden.projections.search.service import SearchService

CHECKOUT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- bench-report:begin (memwarden bench report writes this section; edit the bench, not it) -->"
END = "<!-- bench-report:end -->"
RERANK_DEPTHS = (10, 20, RERANK_DEPTH)
"""The reranked configurations of the trade-off curve (the default depth last)."""
REFERENCE = "hybrid"
"""The search configuration every other one is read against: the driver without a reranker."""
QUICK_TURNS = 60
QUICK_QUESTIONS = 8
QUICK_INGEST_TEXTS = 96


class Configuration(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    recall_at5: float
    recall_at10: float
    p50_ms: float
    p95_ms: float


class CategoryRecall(msgspec.Struct, frozen=True, kw_only=True):
    configuration: str
    category: str
    questions: int
    recall_at10: float


class SearchEvidence(msgspec.Struct, frozen=True, kw_only=True):
    data: str
    embedder: str
    reranker: str | None
    conversations: int
    turns: int
    questions: int
    configurations: list[Configuration]
    categories: list[CategoryRecall]
    latencies_ms: dict[str, list[float]]


class ReportRun(msgspec.Struct, frozen=True, kw_only=True):
    machine: Machine
    command: str
    quick: bool
    search: SearchEvidence
    ingest: IngestReport
    footprint: FootprintReport | None


# -- the search evidence --------------------------------------------------------------------------------


def _quick(samples: Sequence[locomo.Sample]) -> list[locomo.Sample]:
    """One conversation's first turns, and its first questions whose evidence is among them."""
    first = samples[0]
    turns = first.turns[:QUICK_TURNS]
    known = {t.dia_id for t in turns}
    questions = [q for q in first.questions if q.evidence and set(q.evidence) <= known][:QUICK_QUESTIONS]
    return [locomo.Sample(first.sample_id, turns, tuple(questions))]


def _first_questions(samples: Sequence[locomo.Sample], count: int) -> list[locomo.Sample]:
    """Every turn, and each conversation's share of ``count`` questions (its first ones): a
    shorter run on the same conversations."""
    share = max(1, count // len(samples))
    return [locomo.Sample(s.sample_id, s.turns, s.questions[:share]) for s in samples]


def _configured(service: SearchService) -> list[str]:
    """The lanes, the hybrid driver, and the reranked depths when a reranker is configured."""
    names = list(locomo.DRIVERS)
    reranker, _depth = reranker_from_settings(Settings.from_env())
    if reranker is not None:
        for depth in RERANK_DEPTHS:
            name = f"reranked@{depth}"
            service.drivers[name] = HybridDriver(reranker=reranker, rerank_depth=depth)
            names.append(name)
    return names


def _recall(tally: locomo.Tally, name: str, k: int, categories: Sequence[int]) -> float:
    questions = sum(tally.questions[c] for c in categories)
    found = sum(tally.recall.get(f"{name}@{k}/{c}", 0.0) for c in categories)
    return round(found / questions, 4) if questions else 0.0


def measure_search(path: Path, samples: Sequence[locomo.Sample]) -> SearchEvidence:
    with (
        scratch_database(f"memwarden_bench_report_{os.getpid()}") as (settings, _params),
        Runtime(settings) as runtime,
    ):
        ingested = locomo.ingest(runtime, samples)
        locomo.catch_up(runtime)
        service = locomo.search_service(runtime)
        try:
            names = _configured(service)
            tally = locomo.score(service, samples, ingested, names)
        finally:
            service.close()
    everything = list(locomo.CATEGORIES)
    latencies = {name: [round(s * 1000, 3) for s in tally.latencies.get(name, [])] for name in names}
    reranker = getattr(service.drivers.get(names[-1]), "reranker", None)
    return SearchEvidence(
        data=str(path),
        embedder=service.embedder.model_id if service.embedder is not None else "none",
        reranker=getattr(reranker, "model_id", None),
        conversations=len(samples),
        turns=sum(len(s.turns) for s in samples),
        questions=sum(tally.questions.values()),
        configurations=[
            Configuration(
                name=name,
                recall_at5=_recall(tally, name, 5, everything),
                recall_at10=_recall(tally, name, 10, everything),
                p50_ms=round(percentile(latencies[name], 0.50), 2),
                p95_ms=round(percentile(latencies[name], 0.95), 2),
            )
            for name in names
        ],
        categories=[
            CategoryRecall(
                configuration=name,
                category=label,
                questions=sum(tally.questions[c] for c in cs),
                recall_at10=_recall(tally, name, 10, cs),
            )
            for name in names
            for label, cs in [*((n, [c]) for c, n in locomo.CATEGORIES.items()), ("overall", everything)]
            if any(tally.questions[c] for c in cs)  # a category no question of the run asked: left out
        ],
        latencies_ms=latencies,
    )


# -- the run --------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> ReportRun:
    machine = machine_now()
    path = Path(args.data) if args.data else locomo.DEFAULT_DATA
    samples = locomo.load(path)[: args.conversations or None]
    if args.quick:
        samples = _quick(samples)
    elif args.questions:
        samples = _first_questions(samples, args.questions)
    search = measure_search(path, samples)
    # The turns of the conversations searched (their raw text, as bench ingest posts it).
    texts = turn_texts(path)[: QUICK_INGEST_TEXTS if args.quick else search.turns]
    ingest = measure_ingest(texts, 1 if args.quick else 2, 64)
    footprint = None
    if not args.quick:
        from benchmarks.footprint import measure as measure_footprint  # noqa: PLC0415 - serve, a worker, Redis

        footprint = measure_footprint(argparse.Namespace(writes=args.writes, no_install=args.no_install))
    return ReportRun(
        machine=machine,
        command=invocation("report"),
        quick=args.quick,
        search=search,
        ingest=ingest,
        footprint=footprint,
    )


def run_report_bench(args: argparse.Namespace) -> int:
    from benchmarks.report_figures import write_report  # noqa: PLC0415 - matplotlib, only here

    path = Path(args.data) if args.data else locomo.DEFAULT_DATA
    if not path.is_file():
        sys.stderr.write(f"no LoCoMo data at {path} (give --data PATH)\n")
        return 2
    run = measure(args)
    out = Path(args.out) if args.out else CHECKOUT / "docs" / "benchmarks.md"
    images = Path(args.images) if args.images else CHECKOUT / "docs" / "img"
    written = write_report(run, out, images)
    if args.json:
        sys.stdout.write(msgspec.json.encode(run).decode() + "\n")
    else:
        sys.stdout.write("\n".join(f"wrote {p}" for p in [out, *written]) + "\n")
    return 0
