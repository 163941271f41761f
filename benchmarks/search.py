"""`memwarden bench search`: the search syscall (no HTTP) on N real memories, next to a
raw pgvector top-k query on the same rows and the same HNSW index, in the same run.

For each size N:

1. A scratch database; a namespace tree (tenant ``acme``: 4 departments x 5 teams x 2-4
   projects, and a smaller ``globex``) with N generated, distinct sentences spread
   unevenly over it (``api/cli/bench/corpus.py``).
2. The corpus is embedded with the real default model in batches of 64 (one at a time
   would take too long); the write path then gets an embedder that hands back those rows
   (same model id and dimensions, so the HNSW index is the one used in production).
3. Ingest through ``runtime.memory.write`` with several writer threads, each memory
   written by an agent of its namespace; wait for the projections; ``VACUUM ANALYZE``.
4. Distinct generated questions, each asked by an agent of a leaf namespace (its scope is
   the leaf and its ancestors). Timed: ``runtime.reads.search.search`` (query embedded on
   every call, no cache hit possible), and the raw ``ORDER BY embedding <=> q LIMIT 10``
   with the query's vector precomputed (default ``hnsw.ef_search``), alternating which
   goes first. Also timed apart, to show where the time goes: embedding one query, the
   search without embedding (view + driver + hydrate, vector given), and each lane alone.

Targets: p50(search) / p50(raw) <= 2.5x; search p95 < 25 ms at 100k memories.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import resource
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import numpy as np
import psycopg
from psycopg.sql import SQL, Identifier

from benchmarks.common import configured_model, mean, percentile, scratch_database
from benchmarks.corpus import Corpus, corpus, questions
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding import CachingEmbedder, Embedder
from memwarden.domain.embedding.base import EmbedderWrapper, Matrix
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.settings import Settings
from memwarden.projections.search.drivers import BASELINE, SearchRequest, candidates_for
from memwarden.projections.search.halfvec import HalfvecParam
from memwarden.projections.search.projection import hnsw_index_name
from memwarden.projections.search.service import SearchQuery, SearchService, hydrate
from memwarden.projections.search.stages import recording

RATIO_TARGET = 2.5
P95_TARGET_MS = 25.0
P95_TARGET_SIZE = 100_000
K = 10
EMBED_BATCH = 64
WARM_UP_QUERIES = 20
CATCH_UP_TIMEOUT_SECONDS = 3600.0
VACUUMED = ("search_docs", "search_postings", "search_terms", "search_stats", "memory_objects", "shares")


class SearchBenchRow(msgspec.Struct, kw_only=True):
    profile: dict[str, list[float]] | None = None
    """``--profile``: each stage's [p50, p95] in ms over the measured searches."""
    size: int
    namespaces: int
    leaves_asking: int
    mean_scope_memories: float
    embed_corpus_seconds: float
    writers: int
    ingest_seconds: float
    ingest_per_second: float
    outcomes: dict[str, int]
    embedder_fallbacks: int
    catch_up_seconds: float
    vacuum_seconds: float
    queries: int
    search_p50_ms: float
    search_p95_ms: float
    search_mean_ms: float
    search_results_mean: float
    raw_p50_ms: float
    raw_p95_ms: float
    raw_mean_ms: float
    raw_results_mean: float
    ratio_p50: float
    ratio_no_embed_p50: float
    ratio_target: float = RATIO_TARGET
    p95_target_ms: float | None
    embed_query_p50_ms: float
    search_no_embed_p50_ms: float
    search_no_embed_p95_ms: float
    vector_lane_p50_ms: float
    lexical_lane_p50_ms: float
    search_docs_mb: float
    hnsw_index_mb: float
    search_postings_mb: float
    search_tables_mb: float
    peak_rss_mb: float


# -- the write path's embedder ------------------------------------------------------------------


class PrecomputedEmbedder(EmbedderWrapper):
    """The real model's rows for known texts (computed beforehand in batches); anything else
    goes to the real model. Rows are kept as float16, the precision the ledger seals anyway."""

    def __init__(self, inner: Embedder, texts: Sequence[str], rows: Matrix) -> None:
        super().__init__(inner)
        self._index = {text: i for i, text in enumerate(texts)}
        self._rows = rows.astype(np.float16)
        self._lock = threading.Lock()
        self.fallbacks = 0

    def embed(self, texts: Sequence[str]) -> Matrix:
        missing = [t for t in texts if t not in self._index]
        computed: dict[str, Matrix] = {}
        if missing:
            with self._lock:
                self.fallbacks += len(missing)
            computed = dict(zip(missing, self.inner.embed(missing), strict=True))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            found = self._index.get(text)
            out[row] = self._rows[found] if found is not None else computed[text]
        return out


def embed_in_batches(model: Embedder, texts: Sequence[str]) -> Matrix:
    rows = np.empty((len(texts), model.dimensions), dtype=np.float32)
    for start in range(0, len(texts), EMBED_BATCH):
        rows[start : start + EMBED_BATCH] = model.embed(list(texts[start : start + EMBED_BATCH]))
        if start and start % (EMBED_BATCH * 250) == 0:
            progress(f"  embedded {start}/{len(texts)}")
    return rows


def progress(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


# -- ingest -------------------------------------------------------------------------------------


def ingest(runtime: Runtime, items: Sequence[tuple[str, str]], writers: int) -> tuple[float, Counter[str]]:
    """Write every (namespace, sentence) through the write path; ``writers`` threads."""
    agents = {ns: Identity(ns, f"agent-{n}", "agent") for n, ns in enumerate(sorted({ns for ns, _ in items}))}
    claim = itertools.count()
    step = max(1000, len(items) // 10)

    def work() -> Counter[str]:
        seen: Counter[str] = Counter()
        while (i := next(claim)) < len(items):
            namespace, text = items[i]
            result = runtime.memory.write(agents[namespace], WriteMemory(content=text))
            if result.outcome == "rejected":
                raise RuntimeError(f"benchmark write rejected: {result.rejected}")
            seen[result.outcome] += 1
            if i and i % step == 0:
                progress(f"  written {i}/{len(items)}")
        return seen

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=writers, thread_name_prefix="writer") as pool:
        futures = [pool.submit(work) for _ in range(writers)]
        outcomes = sum((f.result() for f in futures), Counter[str]())
    return time.perf_counter() - began, outcomes


def catch_up(runtime: Runtime) -> float:
    """Wait until every projection reflects the ledger head."""
    began = time.perf_counter()
    head = runtime.ledger.head_position()
    runner = runtime.reads.runner
    while runner.position() < head:
        if runner.errors:
            raise RuntimeError(f"a projection stopped: {runner.errors}")
        if time.perf_counter() - began > CATCH_UP_TIMEOUT_SECONDS:
            raise RuntimeError(f"projections still behind the head {head} after {CATCH_UP_TIMEOUT_SECONDS}s")
        time.sleep(0.1)
    return time.perf_counter() - began


def vacuum(conn: psycopg.Connection[Any], schema: str) -> float:
    began = time.perf_counter()
    for table in VACUUMED:
        conn.execute(SQL("VACUUM ANALYZE {}.{}").format(Identifier(schema), Identifier(table)))
    return time.perf_counter() - began


# -- queries ------------------------------------------------------------------------------------


class Asked(msgspec.Struct, frozen=True):
    identity: Identity
    text: str
    vector: Any  # np.ndarray: the query's embedding, computed once and timed
    bound: Any  # HalfvecParam: the vector as both sides bind it


def ask(data: Corpus, count: int, seed: int, model: Embedder) -> tuple[list[Asked], list[float]]:
    """Distinct questions, each from an agent of a random leaf; also the time to embed each."""
    rng = random.Random(seed)  # noqa: S311 - reproducible data, not secrets
    stored = frozenset(text for _, text in data.items)
    asked: list[Asked] = []
    seconds: list[float] = []
    for n, text in enumerate(questions(count, rng, avoid=stored)):
        leaf = rng.choice(data.leaves)
        began = time.perf_counter()
        vector = model.embed([text])[0]
        seconds.append(time.perf_counter() - began)
        asked.append(Asked(Identity(leaf, f"asker-{n}", "agent"), text, vector, HalfvecParam(vector)))
    return asked, seconds


def timed(run: Callable[[Asked], int], q: Asked) -> tuple[float, int]:
    began = time.perf_counter()
    found = run(q)
    return time.perf_counter() - began, found


def raw_query(conn: psycopg.Connection[Any], schema: str, model: str, dims: int) -> Callable[[Asked], int]:
    statement = SQL(
        "SELECT ref FROM {s}.search_docs WHERE model = %s"
        " ORDER BY embedding::halfvec({d}) <=> %s::halfvec({d}) LIMIT {k}"
    ).format(s=Identifier(schema), d=dims, k=K)

    def run(q: Asked) -> int:
        return len(conn.execute(statement, (model, q.bound)).fetchall())

    return run


def syscall(service: SearchService) -> Callable[[Asked], int]:
    def run(q: Asked) -> int:
        return len(service.search(q.identity, SearchQuery(query=q.text, k=K)).results)

    return run


def without_embedding(service: SearchService) -> Callable[[Asked], int]:
    """The syscall's work minus embedding the query: view, the baseline driver, hydrate."""
    driver = service.drivers[BASELINE]

    def run(q: Asked) -> int:
        request = SearchRequest(query=q.text, k=K)
        with service.view(q.identity, SearchQuery(query=q.text, k=K), lambda: q.vector) as (view, *_):
            return len(hydrate(view, driver.search(view, request)[:K]))

    return run


def lane(service: SearchService, which: str) -> Callable[[Asked], int]:
    n = candidates_for(K)

    def run(q: Asked) -> int:
        with service.view(q.identity, SearchQuery(query=q.text, k=K), lambda: q.vector) as (
            view,
            _c,
            _s,
            _sh,
        ):
            hits = view.vector_lane(n) if which == "vector" else view.lexical_lane(n)
            return len(hits)

    return run


Timings = tuple[list[float], list[int]]


def measure(run: Callable[[Asked], int], asked: Sequence[Asked]) -> Timings:
    out: Timings = ([], [])
    for q in asked:
        took, found = timed(run, q)
        out[0].append(took)
        out[1].append(found)
    return out


def alternating(
    first: Callable[[Asked], int], second: Callable[[Asked], int], asked: Sequence[Asked]
) -> tuple[Timings, Timings]:
    """Both on every query, taking turns at going first (neither always finds the pages warm)."""
    a: Timings = ([], [])
    b: Timings = ([], [])
    for n, q in enumerate(asked):
        order = ((first, a), (second, b)) if n % 2 == 0 else ((second, b), (first, a))
        for run, into in order:
            took, found = timed(run, q)
            into[0].append(took)
            into[1].append(found)
    return a, b


# -- memory -------------------------------------------------------------------------------------


def sizes_mb(conn: psycopg.Connection[Any], schema: str, model: str) -> dict[str, float]:
    names = {
        "search_docs": f'"{schema}".search_docs',
        "search_postings": f'"{schema}".search_postings',
        "search_terms": f'"{schema}".search_terms',
        "search_stats": f'"{schema}".search_stats',
    }
    out: dict[str, float] = {}
    for key, name in names.items():
        row = conn.execute("SELECT pg_total_relation_size(%s::regclass) AS b", (name,)).fetchone()
        out[key] = (row[0] if row else 0) / 2**20
    row = conn.execute(
        "SELECT pg_relation_size(%s::regclass) AS b", (f'"{schema}".{hnsw_index_name(model)}',)
    ).fetchone()
    out["hnsw"] = (row[0] if row else 0) / 2**20
    return out


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


# -- one size -----------------------------------------------------------------------------------


def ms(values: list[float], fraction: float) -> float:
    return round(percentile(values, fraction) * 1000, 3)


def mean_scope(data: Corpus) -> float:
    per_namespace = Counter(ns for ns, _ in data.items)
    return round(mean([float(sum(per_namespace[a] for a in ancestors(leaf))) for leaf in data.leaves]), 1)


def check_embedder(runtime: Runtime, model: Embedder) -> None:
    embedder = runtime.reads.search.embedder
    if embedder is None or embedder.model_id != model.model_id:
        found = "none" if embedder is None else embedder.model_id
        raise SystemExit(
            f"bench search needs the configured embedder {model.model_id}, but the service has {found}"
        )


def run_size(size: int, args: argparse.Namespace, model: Embedder) -> SearchBenchRow:
    data = corpus(size, args.seed)
    texts = [text for _, text in data.items]
    progress(f"size {size}: embedding {size} sentences in batches of {EMBED_BATCH}")
    began = time.perf_counter()
    rows = embed_in_batches(model, texts)
    embed_seconds = time.perf_counter() - began
    with scratch_database(f"memwarden_bench_search_{os.getpid()}") as (scratch, params):
        settings = msgspec.structs.replace(scratch, pool_size=args.writers + 4)
        with Runtime(settings) as runtime, psycopg.connect(params.conninfo(), autocommit=True) as conn:
            check_embedder(runtime, model)
            writes = PrecomputedEmbedder(model, texts, rows)
            del rows
            runtime.memory.embedder = writes
            progress(f"size {size}: ingesting with {args.writers} writers")
            ingest_seconds, outcomes = ingest(runtime, data.items, args.writers)
            catch_up_seconds = catch_up(runtime)
            vacuum_seconds = vacuum(conn, runtime.ledger.schema)
            progress(f"size {size}: {WARM_UP_QUERIES} warm-up and {args.queries} measured queries")
            asked, embed_query = ask(data, WARM_UP_QUERIES + args.queries, args.seed + size, model)
            timings = query_timings(runtime, conn, asked)
            profile = stage_profile(runtime.reads.search, asked[WARM_UP_QUERIES:]) if args.profile else None
            memory = sizes_mb(conn, runtime.ledger.schema, model.model_id)
    return SearchBenchRow(
        size=size,
        namespaces=len(data.namespaces),
        leaves_asking=len({q.identity.namespace for q in asked[WARM_UP_QUERIES:]}),
        mean_scope_memories=mean_scope(data),
        embed_corpus_seconds=round(embed_seconds, 1),
        writers=args.writers,
        ingest_seconds=round(ingest_seconds, 1),
        ingest_per_second=round(size / ingest_seconds, 1),
        outcomes=dict(outcomes),
        embedder_fallbacks=writes.fallbacks,
        catch_up_seconds=round(catch_up_seconds, 1),
        vacuum_seconds=round(vacuum_seconds, 1),
        queries=args.queries,
        embed_query_p50_ms=ms(embed_query[WARM_UP_QUERIES:], 0.5),
        search_docs_mb=round(memory["search_docs"], 1),
        hnsw_index_mb=round(memory["hnsw"], 1),
        search_postings_mb=round(memory["search_postings"], 1),
        search_tables_mb=round(sum(v for k, v in memory.items() if k != "hnsw"), 1),
        peak_rss_mb=round(peak_rss_mb(), 1),
        p95_target_ms=P95_TARGET_MS if size >= P95_TARGET_SIZE else None,
        profile=profile,
        **timings,
    )


REST = "the rest (scope, view, statements between)"


def stage_profile(service: SearchService, asked: Sequence[Asked]) -> dict[str, list[float]]:
    """Every search timed stage by stage (``projections/search/stages.py``), the query
    embedded apart (it runs beside the view's opening; its wait shows in the vector lane)."""
    if isinstance(service.embedder, CachingEmbedder):
        service.embedder.clear()
    per_stage: dict[str, list[float]] = {}
    for q in asked:
        with recording() as stages:
            began = time.perf_counter()
            service.search(q.identity, SearchQuery(query=q.text, k=K))
            total = time.perf_counter() - began
        stages[REST] = max(0.0, total - sum(stages.values()))
        stages["total"] = total
        for name, seconds in stages.items():
            per_stage.setdefault(name, []).append(seconds)
    embedder = service.embedder
    if embedder is not None:
        inner = embedder.inner if isinstance(embedder, CachingEmbedder) else embedder
        per_stage["embedding one query (apart)"] = [
            timed(lambda t: len(inner.embed([t.text])), q)[0] for q in asked
        ]
    return {name: [ms(v, 0.5), ms(v, 0.95)] for name, v in per_stage.items()}


def query_timings(
    runtime: Runtime, conn: psycopg.Connection[Any], asked: Sequence[Asked]
) -> dict[str, float]:
    service = runtime.reads.search
    schema = runtime.ledger.schema
    model, dims = service.vector_model or ("", 0)
    search, raw = syscall(service), raw_query(conn, schema, model, dims)
    warm, measured = asked[:WARM_UP_QUERIES], asked[WARM_UP_QUERIES:]
    alternating(search, raw, warm)
    if isinstance(service.embedder, CachingEmbedder):
        service.embedder.clear()  # the measured questions are distinct anyway: each is embedded
    (ours, our_found), (theirs, their_found) = alternating(search, raw, measured)
    bare, _ = measure(without_embedding(service), measured)
    vector_lane, _ = measure(lane(service, "vector"), measured)
    lexical_lane, _ = measure(lane(service, "lexical"), measured)
    ratio = percentile(ours, 0.5) / percentile(theirs, 0.5)
    return {
        "search_p50_ms": ms(ours, 0.5),
        "search_p95_ms": ms(ours, 0.95),
        "search_mean_ms": round(mean(ours) * 1000, 3),
        "search_results_mean": round(mean([float(n) for n in our_found]), 2),
        "raw_p50_ms": ms(theirs, 0.5),
        "raw_p95_ms": ms(theirs, 0.95),
        "raw_mean_ms": round(mean(theirs) * 1000, 3),
        "raw_results_mean": round(mean([float(n) for n in their_found]), 2),
        "ratio_p50": round(ratio, 2),
        "ratio_no_embed_p50": round(percentile(bare, 0.5) / percentile(theirs, 0.5), 2),
        "search_no_embed_p50_ms": ms(bare, 0.5),
        "search_no_embed_p95_ms": ms(bare, 0.95),
        "vector_lane_p50_ms": ms(vector_lane, 0.5),
        "lexical_lane_p50_ms": ms(lexical_lane, 0.5),
    }


# -- the command ----------------------------------------------------------------------------------


def run_search_bench(args: argparse.Namespace) -> int:
    sizes = [int(s) for s in str(args.sizes or "10000,100000").split(",") if s.strip()]
    began = time.perf_counter()
    model = configured_model("search --in-process", Settings.from_env())
    rows = [run_size(size, args, model) for size in sizes]
    wall = round(time.perf_counter() - began, 1)
    ok = all(verdicts(r) == (True, True) for r in rows)
    if args.json:
        sys.stdout.write(
            msgspec.json.encode({"rows": rows, "wall_seconds": wall, "targets_met": ok}).decode() + "\n"
        )
    else:
        print_report(rows, wall)
    return 0


def verdicts(row: SearchBenchRow) -> tuple[bool, bool]:
    """(ratio target met, p95 target met or not applicable)."""
    p95_ok = row.p95_target_ms is None or row.search_p95_ms < row.p95_target_ms
    return row.ratio_p50 <= row.ratio_target, p95_ok


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def print_report(rows: Sequence[SearchBenchRow], wall: float) -> None:
    out = sys.stdout.write
    out("memwarden bench search — SearchService.search (no HTTP, query embedded each call)\n")
    out(f"  vs raw pgvector top-{K} on the same rows and HNSW index (vector precomputed), same run\n\n")
    for r in rows:
        for line in _details(r):
            out(line + "\n")
        out("\n")
    out(
        f"{'size':>8} | {'search p50':>10} {'p95':>7} | {'raw p50':>7} {'p95':>7} | "
        f"{'ratio':>6} {'target':>7} {'':6} | {'p95 target':>10} {'':6}\n"
    )
    for r in rows:
        ratio_ok, p95_ok = verdicts(r)
        p95_target = f"<{r.p95_target_ms:g} ms" if r.p95_target_ms is not None else "-"
        out(
            f"{r.size:>8} | {r.search_p50_ms:>10.2f} {r.search_p95_ms:>7.2f} | {r.raw_p50_ms:>7.2f} "
            f"{r.raw_p95_ms:>7.2f} | {r.ratio_p50:>5.2f}x {'<=' + format(r.ratio_target, 'g') + 'x':>7} "
            f"{_verdict(ratio_ok):6} | {p95_target:>10} {_verdict(p95_ok) if r.p95_target_ms else '':6}\n"
        )
    out(f"total wall time {wall:.1f} s\n")


def _details(r: SearchBenchRow) -> Iterator[str]:
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(r.outcomes.items()))
    yield (
        f"size {r.size}: {r.namespaces} namespaces in 2 tenants; queries from {r.leaves_asking} leaf "
        f"namespaces, a leaf's scope holds {r.mean_scope_memories:.0f} memories on average"
    )
    yield f"  corpus embedding     {r.embed_corpus_seconds:.1f} s (batches of {EMBED_BATCH})"
    yield (
        f"  ingest               {r.ingest_seconds:.1f} s, {r.ingest_per_second:.1f} writes/s "
        f"({r.writers} writers; {outcomes}; {r.embedder_fallbacks} texts embedded at write time)"
    )
    yield f"  projections catch-up {r.catch_up_seconds:.1f} s after the last write; VACUUM ANALYZE {r.vacuum_seconds:.1f} s"
    yield (
        f"  search p50/p95/mean  {r.search_p50_ms:.2f} / {r.search_p95_ms:.2f} / {r.search_mean_ms:.2f} ms "
        f"({r.queries} queries, {r.search_results_mean:.1f} results each)"
    )
    yield (
        f"  raw    p50/p95/mean  {r.raw_p50_ms:.2f} / {r.raw_p95_ms:.2f} / {r.raw_mean_ms:.2f} ms "
        f"({r.raw_results_mean:.1f} rows each)"
    )
    yield (
        f"  where the time goes: embed one query p50 {r.embed_query_p50_ms:.2f} ms; search without "
        f"embedding p50/p95 {r.search_no_embed_p50_ms:.2f} / {r.search_no_embed_p95_ms:.2f} ms "
        f"({r.ratio_no_embed_p50:.2f}x raw); vector lane p50 {r.vector_lane_p50_ms:.2f} ms; lexical lane p50 {r.lexical_lane_p50_ms:.2f} ms"
    )
    if r.profile:
        yield "  stages (p50 / p95 ms, same searches; a stage not run by a search counts only where run):"
        for name, (p50, p95) in r.profile.items():
            yield f"    {name:48} {p50:8.2f} / {p95:8.2f}"
    yield (
        f"  memory: search tables {r.search_tables_mb:.1f} MB (search_docs {r.search_docs_mb:.1f} MB incl. "
        f"HNSW index {r.hnsw_index_mb:.1f} MB; postings {r.search_postings_mb:.1f} MB); "
        f"bench process peak RSS {r.peak_rss_mb:.0f} MB"
    )
