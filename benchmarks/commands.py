"""The ``memwarden bench …`` commands: their arguments here, their code imported only when
one of them runs (a benchmark pulls in HTTP clients, worker processes and their helpers,
which no other command needs: every ``memwarden`` process would pay for them at start-up)."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

from memwarden.api.cli.timetravel import register_time_bench
from memwarden.domain.model.write import MAX_BATCH_ITEMS

Handler = Callable[[argparse.Namespace], int]


def lazy(module: str, function: str) -> Handler:
    """A handler that imports ``module`` when the command runs and calls its ``function``."""

    def run(args: argparse.Namespace) -> int:
        code: int = getattr(importlib.import_module(module), function)(args)
        return code

    return run


def cmd_bench_search(args: argparse.Namespace) -> int:
    if args.mode == "in-process":
        return lazy("benchmarks.search", "run_search_bench")(args)
    return lazy("benchmarks.search_http", "run_http_search_bench")(args)


def register(bench: Any) -> None:
    """Every ``memwarden bench …`` subcommand, added to the ``bench`` group's subparsers."""
    write = bench.add_parser("write", help="sustained writes through domain+ledger vs plain INSERT")
    write.add_argument("--seconds", type=float, default=5.0, help="measuring time per run")
    write.add_argument("--writers", default="1,4,16", help="comma-separated writer counts")
    write.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="instead: this many tenants writing at once, on one chain and on a chain per tenant"
        " (MEMWARDEN_LEDGER_CHAINS), same run, separate scratch databases; a writer PROCESS per"
        " tenant, since threads of one process share one group commit and one GIL and cannot"
        " show the cost of the ledger's lock",
    )
    write.add_argument(
        "--writers-per-tenant",
        type=int,
        default=2,
        help="writer threads in each tenant's process (with --tenants)",
    )
    write.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --tenants: run every mode this many times, one mode after the other (ratios: the median)",
    )
    write.add_argument(
        "--thread-reference",
        action="store_true",
        help="with --tenants: also run the same writers as threads of one process (the GIL's reference)",
    )
    write.add_argument("--json", action="store_true")
    write.set_defaults(handler=lazy("benchmarks.write", "run_write_bench"))
    api = bench.add_parser(
        "api", help="write and read over HTTP vs in-process, and a tool call over /mcp vs HTTP, same run"
    )
    api.add_argument("--seconds", type=float, default=3.0, help="measuring time per run")
    api.add_argument("--clients", default="1,16", help="comma-separated client counts")
    api.add_argument("--server-workers", type=int, default=1, help="uvicorn workers of the served process")
    api.add_argument("--json", action="store_true")
    api.set_defaults(handler=lazy("benchmarks.api", "run_api_bench"))
    search = bench.add_parser("search", help="search latency over HTTP (or in-process vs raw pgvector top-k)")
    search.add_argument(
        "--mode",
        choices=("http", "in-process"),
        default="http",
        help="http: one client against a served namespace; in-process: the syscall vs raw pgvector",
    )
    search.add_argument(
        "--sizes", help="comma-separated memory counts (default 5000 over HTTP, 10000,100000 in-process)"
    )
    search.add_argument("--queries", type=int, default=300, help="measured queries per size")
    search.add_argument("--writers", type=int, default=4, help="writer threads for the ingest")
    search.add_argument("--seed", type=int, default=7)
    search.add_argument(
        "--profile",
        action="store_true",
        help="also time each stage of every search (embedding, lanes, fusion, rerank, hydrate, "
        "audit append, HTTP), p50 and p95 per stage, same run (the server's Server-Timing header)",
    )
    search.add_argument(
        "--configs",
        help="over HTTP: several served configurations side by side, each question asked of each "
        "in turn (same run, same load), e.g. 'default; no-rerank: MEMWARDEN_RERANK=none'",
    )
    search.add_argument("--json", action="store_true")
    search.set_defaults(handler=cmd_bench_search)
    locomo = bench.add_parser("locomo", help="evidence recall on LoCoMo: lexical, vector, hybrid")
    locomo.add_argument("--data", help="the LoCoMo JSON file (default ../shared/data/locomo-dev.json)")
    locomo.add_argument(
        "--conversations",
        choices=("all", "tuning", "held-out"),
        default="all",
        help="which conversations: all, or those to tune on, or the last two, held out",
    )
    locomo.add_argument("--json", action="store_true")
    locomo.set_defaults(handler=lazy("benchmarks.locomo", "run_locomo_bench"))
    register_time_bench(bench, lazy("benchmarks.time", "run_time_bench"))
    _register_erase_bench(bench)
    _register_proofs_bench(bench)
    _register_review_bench(bench)
    _register_service_benches(bench)


def _register_erase_bench(bench: Any) -> None:
    erase = bench.add_parser("erase", help="erase 1/100/10,000 memories by ids and subject; writer latency")
    erase.add_argument("--store", type=int, default=100_000, help="memories in the store")
    erase.add_argument("--baseline-seconds", type=float, default=5.0, help="writer alone, before erasing")
    erase.add_argument("--json", action="store_true")
    erase.set_defaults(handler=lazy("benchmarks.erase", "run_erase_bench"))


def _register_proofs_bench(bench: Any) -> None:
    proofs = bench.add_parser(
        "proofs", help="the Merkle tree's upkeep, proofs over HTTP, a witness round, the tree's rebuild"
    )
    proofs.add_argument("--events", type=int, default=100_000, help="size of the generated ledger")
    proofs.add_argument("--queries", type=int, default=300, help="inclusion and consistency proofs timed")
    proofs.add_argument("--json", action="store_true")
    proofs.set_defaults(handler=lazy("benchmarks.proofs", "run_proofs_bench"))


def _register_review_bench(bench: Any) -> None:
    review = bench.add_parser(
        "review", help="a realistic import's findings for people, and a reviewer's queue page over HTTP"
    )
    review.add_argument("--statements", type=int, default=2000, help="statements imported")
    review.add_argument("--open", type=int, default=10_000, help="open findings when the queue is timed")
    review.add_argument("--requests", type=int, default=200, help="requests timed per page shape")
    review.add_argument("--json", action="store_true")
    review.set_defaults(handler=lazy("benchmarks.review", "run_review_bench"))


def _register_service_benches(bench: Any) -> None:
    """``memwarden bench ingest``, ``bench workers`` and ``bench load``."""
    ingest = bench.add_parser(
        "ingest", help="write_batch over HTTP vs the embedder alone and the plain ledger"
    )
    ingest.add_argument("--data", help="the LoCoMo JSON file (default ../shared/data/locomo-dev.json)")
    ingest.add_argument("--limit", type=int, help="only the first N turns")
    ingest.add_argument("--clients", type=int, default=2, help="concurrent HTTP clients")
    ingest.add_argument("--batch", type=int, default=MAX_BATCH_ITEMS, help="turns per write_batch request")
    ingest.add_argument("--json", action="store_true")
    ingest.set_defaults(handler=lazy("benchmarks.ingest", "run_ingest_bench"))
    workers = bench.add_parser(
        "workers", help="the conflict autopilot: judged/s and lag, 1 and 2 worker processes"
    )
    workers.add_argument("--processes", default="1,2", help="worker process counts to run")
    workers.add_argument("--namespaces", type=int, default=8)
    workers.add_argument("--backlog", type=int, default=600, help="memories written before the workers start")
    workers.add_argument("--rate", type=float, default=50.0, help="steady writes per second offered")
    workers.add_argument("--writers", type=int, default=8, help="writer threads offering the steady load")
    workers.add_argument("--seconds", type=float, default=10.0, help="how long the steady load lasts")
    workers.add_argument("--repeat", type=int, default=1, help="rounds of all process counts, back to back")
    workers.add_argument("--timeout", type=float, default=120.0, help="the longest wait for the judgements")
    workers.add_argument("--json", action="store_true")
    workers.set_defaults(handler=lazy("benchmarks.workers", "run_workers_bench"))
    load = bench.add_parser("load", help="N agents, mixed syscalls, workers running: latency, errors, RSS")
    load.add_argument("--agents", type=int, default=16, help="simulated agents, one key and thread each")
    load.add_argument("--seconds", type=float, default=600.0, help="how long the load lasts")
    load.add_argument("--namespaces", type=int, default=4, help="teams in the namespace tree")
    load.add_argument("--workers", type=int, default=2, help="`memwarden worker` processes (with Redis)")
    load.add_argument("--seed", type=int, default=7)
    load.add_argument("--json", action="store_true")
    load.set_defaults(handler=lazy("benchmarks.load", "run_load_bench"))
    judge = bench.add_parser(
        "judge", help="the rules judge's precision and recall per rule on the labelled table of pairs"
    )
    judge.add_argument(
        "--table", default="", help="a JSONL table of pairs (default: benchmarks/data/judge_pairs.jsonl)"
    )
    judge.add_argument(
        "--wrong",
        action="store_true",
        help="also list the tuning part's mistakes (never the held-out part's)",
    )
    judge.add_argument("--json", action="store_true")
    judge.set_defaults(handler=lazy("benchmarks.judge", "run_judge_bench"))
    _register_footprint_bench(bench)
    _register_report_bench(bench)


def _register_footprint_bench(bench: Any) -> None:
    footprint = bench.add_parser(
        "footprint",
        help="RSS of serve, its projector and a worker after start and after writes; install size; CLI start-up",
    )
    footprint.add_argument(
        "--writes", type=int, default=10_000, help="memories written over HTTP between the samples"
    )
    footprint.add_argument(
        "--no-install", action="store_true", help="skip the pip install into a fresh virtualenv"
    )
    footprint.add_argument("--json", action="store_true")
    footprint.set_defaults(handler=lazy("benchmarks.footprint", "run_footprint_bench"))


def _register_report_bench(bench: Any) -> None:
    report = bench.add_parser(
        "report",
        help="run the benches behind docs/benchmarks.md's figures and write them again (PNG plots, Markdown)",
    )
    report.add_argument(
        "--quick", action="store_true", help="a few turns and questions: a smoke test of the path"
    )
    report.add_argument("--data", help="the LoCoMo JSON file (default ../shared/data/locomo-dev.json)")
    report.add_argument("--conversations", type=int, help="only the first N conversations (default: all)")
    report.add_argument("--questions", type=int, help="about N questions in all, each conversation's first")
    report.add_argument(
        "--out", help="the Markdown file whose report section is rewritten (default docs/benchmarks.md)"
    )
    report.add_argument("--images", help="where the PNGs go (default docs/img)")
    report.add_argument(
        "--writes", type=int, default=10_000, help="the footprint's writes (not with --quick)"
    )
    report.add_argument("--no-install", action="store_true", help="skip the footprint's pip install")
    report.add_argument("--json", action="store_true", help="also print what was measured, as JSON")
    report.set_defaults(handler=lazy("benchmarks.report", "run_report_bench"))
