"""`memwarden bench search` over HTTP (the default mode): one client searching a served
namespace of N memories with the default embedder, next to the embedder alone on the same
questions, in the same run.

1. A scratch database; N generated, distinct sentences in one namespace, embedded with the
   real default model in batches and written through the write path in-process (the rows
   handed back by ``PrecomputedEmbedder``, so the index holds the model's own vectors);
   projections caught up; ``VACUUM ANALYZE``.
2. ``memwarden serve`` on a free loopback port (its own projector), an agent key for the
   namespace, a rate limit that does not throttle the run.
3. Distinct questions, each asked once over one persistent connection (``k = 10``): warm-up
   first, then the measured ones. Each measured question is also embedded alone in this
   process, so the report says how much of a search is the query's embedding.
   Before the first measured search the served autopilot is let catch up on the seeded
   memories (``settle``): a one-off backfill of N judgements is not the steady state a search
   meets, and timing beside it measures the backfill; the wait is reported.
4. CPU per search by process (served API, its projector, PostgreSQL, this process) from
   ``/proc``: a search also appends its audit record, which the projector applies.

Targets (issue 27): p50 <= 20 ms, p95 <= 40 ms at 5k memories, in the default
configuration (reranker included). ``--profile``: each stage's p50 and p95 in the same run,
from the ``Server-Timing`` header the served process adds (``MEMWARDEN_SERVER_TIMING=1``).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence

import msgspec
import psycopg
from psycopg.rows import dict_row

from benchmarks.api import HttpClient, _free_port, _serve
from benchmarks.common import configured_model, deployment_env, mean, percentile, scratch_database
from benchmarks.corpus import questions, sentences
from benchmarks.cpu import CpuPerOperation, cpu_ticks, per_operation, postmaster_of, ticks_used
from benchmarks.search import (
    PrecomputedEmbedder,
    catch_up,
    check_embedder,
    embed_in_batches,
    ingest,
    progress,
    vacuum,
)
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import Embedder
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.policies import PolicyBody
from memwarden.domain.settings import Settings
from memwarden.projections.autopilot.views import dispatch_positions
from memwarden.projections.search.stages import parse_server_timing

K = 10
P50_TARGET_MS = 20.0
P95_TARGET_MS = 40.0
WARM_UP_QUERIES = 30
TENANT = "benchsearch"
NAMESPACE = f"{TENANT}/team"
SEARCH_PATH = "/v1/mem/search"


class HttpSearchRow(msgspec.Struct, kw_only=True):
    size: int
    config: str = "default"
    config_env: dict[str, str] = msgspec.field(default_factory=dict)
    namespace: str
    seed_seconds: float
    outcomes: dict[str, int]
    embedder_fallbacks: int
    queries: int
    search_p50_ms: float
    search_p95_ms: float
    search_mean_ms: float
    results_mean: float
    embed_p50_ms: float
    embed_p95_ms: float
    embed_share_p50: float
    p50_target_ms: float = P50_TARGET_MS
    p95_target_ms: float = P95_TARGET_MS
    cpu_us: CpuPerOperation | None = None
    profile: dict[str, list[float]] | None = None
    """``--profile``: each stage's [p50 ms, p95 ms, share of the searches that ran it]."""
    load: str = ""
    """The machine's load averages (1, 5, 15 min) before and after the measured searches."""
    settle_seconds: float = 0.0
    """How long the served autopilot took to catch up on the seeded memories (``settle``)."""
    passes_behind: int = 0
    """Ledger events the served dispatchers had not handed on when the measured searches began."""


def met(row: HttpSearchRow) -> bool:
    return row.search_p50_ms <= row.p50_target_ms and row.search_p95_ms <= row.p95_target_ms


# -- seeding ---------------------------------------------------------------------------------------


def seed(runtime: Runtime, model: Embedder, texts: Sequence[str], writers: int) -> tuple[Counter[str], int]:
    """Write ``texts`` into ``NAMESPACE`` with the model's rows computed in batches."""
    rows = embed_in_batches(model, texts)
    writes = PrecomputedEmbedder(model, texts, rows)
    runtime.memory.embedder = writes
    _seconds, outcomes = ingest(runtime, [(NAMESPACE, text) for text in texts], writers)
    return outcomes, writes.fallbacks


def agent_key(runtime: Runtime) -> str:
    operator = Identity(TENANT, "operator@bench", "owner")
    governance = runtime.core.governance
    governance.set_policy(operator, TENANT, PolicyBody(rate_limit_per_minute=10_000_000))
    return governance.issue_key(operator, IssueKey(target=NAMESPACE, actor="asker", role="agent")).key


# -- measuring -------------------------------------------------------------------------------------


def ask(client: HttpClient, text: str) -> tuple[float, int]:
    """One search over HTTP: (seconds, results)."""
    began = time.perf_counter()
    status, body = client.call("POST", SEARCH_PATH, {"query": text, "k": K})
    took = time.perf_counter() - began
    if status != 200:
        raise RuntimeError(f"search failed: {status} {body[:300]!r}")
    return took, len(msgspec.json.decode(body)["results"])


OVERLAPPING = "embedding (its own thread)"
"""Runs beside the view's opening and the lexical lane; its wait shows in the vector lane."""
HANDLER = "handler"


def stages_of(client: HttpClient, took: float) -> dict[str, float]:
    """The last search's stages from its ``Server-Timing`` header, with what the handler's
    stages leave over (gate, scope, view, statements between) and what HTTP adds (the
    client's wall time less the handler's: transport, framework, encoding)."""
    header = client.last_headers.get("server-timing")
    if header is None:
        raise RuntimeError("the server sent no Server-Timing header (MEMWARDEN_SERVER_TIMING)")
    stages = parse_server_timing(header)
    handler = stages.pop(HANDLER, 0.0)
    inside = sum(v for name, v in stages.items() if name != OVERLAPPING)
    stages["the rest of the handler (gate, scope, view)"] = max(0.0, handler - inside)
    stages["HTTP (client wall less handler)"] = max(0.0, took - handler)
    stages["total (client wall)"] = took
    return stages


def profile_of(per_search: Sequence[dict[str, float]]) -> dict[str, list[float]]:
    """Each stage's [p50 ms, p95 ms, share of the searches that ran it]; a stage's times
    count only in the searches that ran it (the reranker's, with ``adaptive``, in some)."""
    seen: dict[str, list[float]] = {}
    for stages in per_search:
        for name, seconds in stages.items():
            seen.setdefault(name, []).append(seconds)
    return {name: [ms(v, 0.5), ms(v, 0.95), round(len(v) / len(per_search), 3)] for name, v in seen.items()}


def load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (other work shares the cores)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def embed_alone(model: Embedder, text: str) -> float:
    began = time.perf_counter()
    model.embed([text])
    return time.perf_counter() - began


def ms(values: list[float], fraction: float) -> float:
    return round(percentile(values, fraction) * 1000, 3)


class Config(msgspec.Struct, frozen=True):
    """A served configuration: its label and the environment it adds to the server's."""

    label: str
    env: dict[str, str]


DEFAULT_CONFIG = Config("default", {})
POOL = 3
"""Each served process's connection pool: one client asks one search at a time."""


def parse_configs(text: str | None) -> list[Config]:
    """``"default; no-rerank: MEMWARDEN_RERANK=none; deep: MEMWARDEN_RERANK_WHEN=always
    MEMWARDEN_RERANK_DEPTH=30"``: configurations separated by ``;``, each a label, and after
    a colon the variables it sets (space-separated ``NAME=value``)."""
    if not text:
        return [DEFAULT_CONFIG]
    configs: list[Config] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        label, _, assignments = part.partition(":")
        env = dict(a.split("=", 1) for a in assignments.split())
        configs.append(Config(label.strip(), env))
    if len({c.label for c in configs}) != len(configs):
        raise SystemExit("bench search --configs: each configuration needs its own label")
    return configs


class Served:
    """One configuration's server and client, and what its measured searches took."""

    def __init__(
        self, config: Config, env: dict[str, str], key: str, *, projects: bool, postmaster: int | None = None
    ) -> None:
        self.config = config
        self.postmaster = postmaster
        port = _free_port()
        # One server projects; the others only read (they share the database), and one client
        # at a time needs few connections (several servers must not exhaust the database's).
        others = {} if projects else {"MEMWARDEN_PROJECTOR": "external"}
        self.server = _serve({**env, "MEMWARDEN_POOL_SIZE": str(POOL), **others, **config.env}, port, 1)
        self.client = HttpClient(port, key)
        self.searches: list[float] = []
        self.found: list[float] = []
        self.stages: list[dict[str, float]] = []
        self.ticks: dict[str, int] = {}

    def ask(self, text: str, *, profile: bool) -> None:
        before = cpu_ticks(self.server.pid, self.postmaster)
        took, results = ask(self.client, text)
        for name, used in ticks_used(before, cpu_ticks(self.server.pid, self.postmaster)).items():
            self.ticks[name] = self.ticks.get(name, 0) + used
        self.searches.append(took)
        self.found.append(float(results))
        if profile:
            self.stages.append(stages_of(self.client, took))

    def close(self) -> None:
        self.client.close()
        self.server.terminate()
        self.server.wait(timeout=30)


SETTLE_TIMEOUT_SECONDS = 1800.0
SETTLED_AFTER_SECONDS = 10.0
"""Dispatchers that have not moved for this long are waiting on nothing (or stuck: reported)."""


def settle(conninfo: str, schema: str, head: int) -> tuple[float, int]:
    """Wait until the served dispatchers have handed every seeded memory (up to ``head``) to
    their passes, or their positions have stood still for ``SETTLED_AFTER_SECONDS``:
    (seconds waited, events still behind the slowest dispatcher)."""
    began = still_since = time.perf_counter()
    last: tuple[tuple[str, int], ...] | None = None
    with psycopg.connect(conninfo, autocommit=True, row_factory=dict_row) as conn:
        while True:
            positions = dispatch_positions(conn, schema)  # not the gauges: they count every memory
            behind = head - min(positions.values(), default=0)
            now = time.perf_counter()
            if tuple(sorted(positions.items())) != last:
                last, still_since = tuple(sorted(positions.items())), now
            if (positions and behind <= 0) or now - still_since >= SETTLED_AFTER_SECONDS:
                return round(now - began, 1), max(behind, 0)
            if now - began > SETTLE_TIMEOUT_SECONDS:
                raise RuntimeError(f"the served dispatchers are still {behind} events behind the seeding")
            time.sleep(0.5)


def measure(
    served: Sequence[Served], model: Embedder, asked: Sequence[str], *, profile: bool
) -> list[dict[str, object]]:
    """Warm up every server, then each measured question asked of every configuration, in
    turn, the first asked rotating (each sees the same load, the same pages warm), and
    embedded alone in this process."""
    for text in asked[:WARM_UP_QUERIES]:
        for one in served:
            ask(one.client, text)
        embed_alone(model, text)
    measured = asked[WARM_UP_QUERIES:]
    load_before = load_average()
    for n, text in enumerate(measured):
        for i in range(len(served)):
            served[(n + i) % len(served)].ask(text, profile=profile)
    load_after = load_average()
    embeds = [embed_alone(model, text) for text in measured]
    return [
        {
            "config": one.config.label,
            "config_env": one.config.env,
            "queries": len(measured),
            "search_p50_ms": ms(one.searches, 0.5),
            "search_p95_ms": ms(one.searches, 0.95),
            "search_mean_ms": round(mean(one.searches) * 1000, 3),
            "results_mean": round(mean(one.found), 2),
            "embed_p50_ms": ms(embeds, 0.5),
            "embed_p95_ms": ms(embeds, 0.95),
            "embed_share_p50": round(percentile(embeds, 0.5) / percentile(one.searches, 0.5), 3),
            "cpu_us": per_operation(one.ticks, len(measured)),
            "profile": profile_of(one.stages) if profile else None,
            "load": f"{load_before} before, {load_after} after",
        }
        for one in served
    ]


def run_size(size: int, args: argparse.Namespace, model: Embedder) -> list[HttpSearchRow]:
    rng = random.Random(args.seed + size)  # noqa: S311 - reproducible data, not secrets
    texts = sentences(size, rng)
    asked = questions(WARM_UP_QUERIES + args.queries, rng, avoid=frozenset(texts))
    configs = parse_configs(args.configs)
    with scratch_database(f"memwarden_bench_search_http_{os.getpid()}") as (scratch, params):
        settings = msgspec.structs.replace(scratch, pool_size=args.writers + 4)
        progress(f"size {size}: embedding and writing {size} memories into {NAMESPACE}")
        began = time.perf_counter()
        with Runtime(settings) as runtime, psycopg.connect(params.conninfo(), autocommit=True) as conn:
            check_embedder(runtime, model)
            outcomes, fallbacks = seed(runtime, model, texts, args.writers)
            key = agent_key(runtime)
            schema, head = runtime.ledger.schema, runtime.ledger.head_position()
            catch_up(runtime)
            vacuum(conn, runtime.ledger.schema)
        seed_seconds = time.perf_counter() - began
        env = deployment_env(settings, **({"MEMWARDEN_SERVER_TIMING": "1"} if args.profile else {}))
        postmaster = postmaster_of(params.conninfo())
        progress(
            f"size {size}: serving {len(configs)} configuration(s); {WARM_UP_QUERIES} warm-up and "
            f"{args.queries} measured searches each"
        )
        served: list[Served] = []
        try:
            for n, config in enumerate(configs):
                served.append(Served(config, env, key, projects=n == 0, postmaster=postmaster))
            progress(f"size {size}: waiting for the served autopilot to judge the seeded memories")
            settle_seconds, behind = settle(params.conninfo(), schema, head)
            figures = measure(served, model, asked, profile=args.profile)
        finally:
            for one in served:
                one.close()
    common = {
        "size": size,
        "namespace": NAMESPACE,
        "seed_seconds": round(seed_seconds, 1),
        "outcomes": dict(outcomes),
        "embedder_fallbacks": fallbacks,
        "settle_seconds": settle_seconds,
        "passes_behind": behind,
    }
    return [msgspec.convert({**common, **f}, HttpSearchRow, from_attributes=True) for f in figures]


# -- the command -------------------------------------------------------------------------------------


def run_http_search_bench(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in str(args.sizes or "5000").split(",") if s.strip()]
    began = time.perf_counter()
    model = configured_model("search", Settings.from_env())
    rows = [row for size in sizes for row in run_size(size, args, model)]
    wall = round(time.perf_counter() - began, 1)
    ok = all(met(r) for r in rows)
    if args.json:
        sys.stdout.write(
            msgspec.json.encode({"rows": rows, "wall_seconds": wall, "targets_met": ok}).decode() + "\n"
        )
    else:
        print_report(rows, wall)
    return 0


def print_report(rows: Sequence[HttpSearchRow], wall: float) -> None:
    out = sys.stdout.write
    out(f"memwarden bench search — POST {SEARCH_PATH} over HTTP, one client, k = {K}, default embedder\n\n")
    for r in rows:
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(r.outcomes.items()))
        verdict = "ok" if met(r) else "MISSED"
        settings = " ".join(f"{k}={v}" for k, v in r.config_env.items()) or "as configured"
        out(f"size {r.size} in {r.namespace}: seeded in {r.seed_seconds:.1f} s ({outcomes})\n")
        out(
            f"  the served autopilot caught up in {r.settle_seconds:.1f} s ({r.passes_behind} events behind)\n"
        )
        out(f"  configuration {r.config}: {settings}\n")
        out(
            f"  search p50 / p95 / mean  {r.search_p50_ms:.2f} / {r.search_p95_ms:.2f} / "
            f"{r.search_mean_ms:.2f} ms ({r.queries} queries, {r.results_mean:.1f} results each); "
            f"targets p50 <= {r.p50_target_ms:g}, p95 <= {r.p95_target_ms:g} ms: {verdict}\n"
        )
        out(
            f"  the query's embedding alone p50 / p95 {r.embed_p50_ms:.2f} / {r.embed_p95_ms:.2f} ms: "
            f"{r.embed_share_p50:.0%} of the search's p50\n"
        )
        if r.cpu_us is not None:
            c = r.cpu_us
            out(
                f"  CPU per search: API {c.api:.0f} us, projector {c.projector:.0f} us, "
                f"PostgreSQL {c.postgres:.0f} us, bench client {c.bench:.0f} us\n"
            )
        out(f"  load average (1, 5, 15 min): {r.load}\n")
        if r.profile:
            out("  stages (p50 / p95 ms over the searches that ran it, and their share):\n")
            for name, (p50, p95, share) in r.profile.items():
                out(f"    {name:48} {p50:8.2f} / {p95:8.2f}  {share:4.0%}\n")
    if len(rows) > 1:
        out(f"\n{'size':>7} {'configuration':24} {'p50 ms':>8} {'p95 ms':>8} {'API CPU us':>10}\n")
        for r in rows:
            cpu = f"{r.cpu_us.api:.0f}" if r.cpu_us is not None else "-"
            out(f"{r.size:>7} {r.config:24} {r.search_p50_ms:>8.2f} {r.search_p95_ms:>8.2f} {cpu:>10}\n")
    out(f"total wall time {wall:.1f} s\n")
