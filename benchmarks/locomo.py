"""`memwarden bench locomo`: evidence recall on LoCoMo, lexical vs vector vs hybrid.

Each conversation gets its own namespace (``locomo/<sample_id>``); each turn becomes one
memory, written in order through the real batch write path (``write_batch``) by an agent
of that namespace, as ``"[8 May 2023] Caroline: <text>"`` (session date, speaker, text;
never the dia_id, the evidence or the answers). The dia_id -> memory id mapping is kept
on the side, from the write results (a deduplicated write maps to the memory it matched).

Every question of categories 1-4 is then searched inside its conversation's namespace
with k = 5 and k = 10, by three drivers through the same ``SearchService`` machinery.
Score: evidence recall, the fraction of the question's evidence dia_ids whose memory is in
the top k, averaged over questions. Evidence ids that match no turn stay in the
denominator (counted as unanswerable and reported); questions without any evidence are
not scored (and reported).

With ``MEMWARDEN_RERANK=ms-marco`` a fourth column, ``reranked``, is the hybrid driver with
its reranking stage (``MEMWARDEN_RERANK_DEPTH``) on every search, and a fifth, ``adaptive``,
the same stage only where the lanes disagree (the default, ``MEMWARDEN_RERANK_WHEN``), with
the share of searches it reranked; all measured in the same run on the same turns.

``--conversations``: ``all`` (default), or ``tuning`` (all but the last two) and
``held-out`` (the last two), so a choice made on the one is checked on turns it never saw.

Target: hybrid beats both single lanes overall.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec

from benchmarks.common import bare, percentile, scratch_database
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.embedding.rerank import reranker_from_settings
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.services.write_results import BatchItem
from memwarden.projections.search.drivers import (
    BASELINE,
    RERANK_DEPTH,
    Driver,
    HybridDriver,
    LanesDisagree,
    LexicalDriver,
    VectorDriver,
)
from memwarden.projections.search.service import SearchQuery, SearchService
from memwarden.projections.search.stages import recording

REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "locomo-dev.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DRIVERS = ("lexical", "vector", "hybrid")
RERANKED = "reranked"
ADAPTIVE = "adaptive"
HELD_OUT = 2
"""The last this many conversations of the file are held out (``--conversations``)."""
KS = (5, 10)
INGEST_BATCH = 64
_SESSION = re.compile(r"session_(\d+)")


# -- the data -------------------------------------------------------------------------------------


class _RawTurn(msgspec.Struct):
    speaker: str
    dia_id: str
    text: str = ""


class _RawQuestion(msgspec.Struct):
    question: str
    category: int
    evidence: list[str] = msgspec.field(default_factory=list)


class _RawSample(msgspec.Struct):
    sample_id: str
    conversation: dict[str, Any]
    qa: list[_RawQuestion]


class Turn(msgspec.Struct, frozen=True):
    dia_id: str
    content: str


class Question(msgspec.Struct, frozen=True):
    text: str
    category: int
    evidence: tuple[str, ...]


class Sample(msgspec.Struct, frozen=True):
    sample_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]


def session_date(raw: str) -> str:
    """``"1:56 pm on 8 May, 2023"`` -> ``"8 May 2023"`` (anything else is kept as it is)."""
    day = raw.split(" on ", 1)[-1]
    return " ".join(day.replace(",", " ").split())


def turns_of(conversation: dict[str, Any]) -> list[Turn]:
    sessions = sorted(
        (int(m.group(1)), key) for key in conversation if (m := _SESSION.fullmatch(key)) is not None
    )
    out: list[Turn] = []
    for number, key in sessions:
        date = session_date(str(conversation.get(f"session_{number}_date_time", "")))
        turns = msgspec.convert(conversation[key], list[_RawTurn])
        out.extend(Turn(t.dia_id, f"[{date}] {t.speaker}: {t.text}") for t in turns)
    return out


def load(path: Path) -> list[Sample]:
    raw = msgspec.json.decode(path.read_bytes(), type=list[_RawSample])
    return [
        Sample(
            sample_id=s.sample_id,
            turns=tuple(turns_of(s.conversation)),
            questions=tuple(
                Question(q.question, q.category, tuple(q.evidence)) for q in s.qa if q.category in CATEGORIES
            ),
        )
        for s in raw
    ]


# -- ingest ---------------------------------------------------------------------------------------


class Ingested(msgspec.Struct, kw_only=True):
    memory_of: dict[str, dict[str, UUID | None]]  # sample -> dia_id -> memory (None: rejected)
    outcomes: dict[str, int]
    seconds: float


def namespace_of(sample: Sample) -> str:
    return f"locomo/{sample.sample_id}"


def agent_of(sample: Sample) -> Identity:
    return Identity(namespace_of(sample), f"agent-{sample.sample_id}", "agent")


def ingest(runtime: Runtime, samples: Sequence[Sample]) -> Ingested:
    """Each conversation's turns in order, through ``write_batch`` (``INGEST_BATCH`` at a time:
    decided in order, one append, embedded together), so the write order is the turns' order."""
    outcomes: Counter[str] = Counter()
    memory_of: dict[str, dict[str, UUID | None]] = {}
    began = time.perf_counter()
    for sample in samples:
        agent = agent_of(sample)
        mapping = memory_of.setdefault(sample.sample_id, {})
        for start in range(0, len(sample.turns), INGEST_BATCH):
            chunk = sample.turns[start : start + INGEST_BATCH]
            batch = runtime.memory.write_batch(
                agent, [BatchItem(command=WriteMemory(content=t.content)) for t in chunk]
            )
            for turn, result in zip(chunk, batch.results, strict=True):
                outcomes[result.outcome] += 1
                mapping[turn.dia_id] = result.id if result.outcome != "rejected" else None
    return Ingested(memory_of=memory_of, outcomes=dict(outcomes), seconds=time.perf_counter() - began)


def catch_up(runtime: Runtime) -> None:
    head = runtime.ledger.head_position()
    runner = runtime.reads.runner
    while runner.position() < head:
        if runner.errors:
            raise RuntimeError(f"a projection stopped: {runner.errors}")
        time.sleep(0.05)


# -- scoring --------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    """Summed recall per (driver, k, category), questions per category, latencies per driver."""

    recall: dict[str, float] = dataclasses.field(default_factory=dict)
    questions: Counter[int] = dataclasses.field(default_factory=Counter)
    latencies: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    reranked: Counter[str] = dataclasses.field(default_factory=Counter)
    """Searches per driver whose reranking stage ran."""
    fallbacks: int = 0

    def drivers(self) -> list[str]:
        """The drivers measured, in the order they were first asked."""
        return list(self.latencies)

    def add(self, driver: str, k: int, category: int, recall: float) -> None:
        key = f"{driver}@{k}/{category}"
        self.recall[key] = self.recall.get(key, 0.0) + recall


def search_service(runtime: Runtime) -> SearchService:
    """The real search machinery with all three drivers and the configured embedder
    (``MEMWARDEN_EMBEDDER``, the one the turns were written with); the model is used without
    a cache, so every search (whichever driver, whichever k) embeds its query."""
    hybrid = HybridDriver()
    drivers: dict[str, Driver] = {
        BASELINE: hybrid,
        "hybrid": hybrid,
        "lexical": LexicalDriver(),
        "vector": VectorDriver(),
    }
    reranker, depth = reranker_from_settings(runtime.settings)
    if reranker is not None:
        drivers[RERANKED] = HybridDriver(reranker=reranker, rerank_depth=depth or RERANK_DEPTH)
        drivers[ADAPTIVE] = HybridDriver(
            reranker=reranker, rerank_depth=depth or RERANK_DEPTH, rerank_when=LanesDisagree()
        )
    embedder = runtime.core.embedder
    model = bare(embedder) if embedder is not None else None
    return SearchService(runtime.ledger, model, runtime.reads.wait_for, drivers=drivers)


def retrieved(
    service: SearchService, tally: Tally, who: Identity, question: str, driver: str, k: int
) -> list[UUID]:
    """The top ``k``, best first. One search serves every smaller k too: a driver ranks the
    same candidates whatever k is up to ``MIN_CANDIDATES / CANDIDATES_PER_RESULT``."""
    with recording() as stages:
        began = time.perf_counter()
        answer = service.search(who, SearchQuery(query=question, k=k), driver_name=driver)
        tally.latencies.setdefault(driver, []).append(time.perf_counter() - began)
    tally.reranked[driver] += "rerank" in stages
    if answer.driver != service.drivers[driver].name:  # "reranked" is a hybrid driver
        tally.fallbacks += 1
    return [r.id for r in answer.results]


def measured(service: SearchService) -> tuple[str, ...]:
    return (*DRIVERS, RERANKED, ADAPTIVE) if RERANKED in service.drivers else DRIVERS


def score(
    service: SearchService,
    samples: Sequence[Sample],
    ingested: Ingested,
    drivers: Sequence[str] | None = None,
) -> Tally:
    """Every question by each of ``drivers`` (default: the lanes, and ``reranked`` when configured)."""
    tally = Tally()
    drivers = measured(service) if drivers is None else drivers
    for sample in samples:
        who, mapping = agent_of(sample), ingested.memory_of[sample.sample_id]
        for q in sample.questions:
            if not q.evidence:
                continue
            wanted = [mapping.get(e) for e in q.evidence]
            tally.questions[q.category] += 1
            for driver in drivers:
                ranked = retrieved(service, tally, who, q.text, driver, max(KS))
                for k in KS:
                    found = set(ranked[:k])
                    hits = sum(1 for m in wanted if m is not None and m in found)
                    tally.add(driver, k, q.category, hits / len(wanted))
    return tally


# -- the report -----------------------------------------------------------------------------------


class RecallRow(msgspec.Struct, kw_only=True):
    category: str
    questions: int
    lexical_at5: float
    lexical_at10: float
    vector_at5: float
    vector_at10: float
    hybrid_at5: float
    hybrid_at10: float
    reranked_at5: float | None = None
    reranked_at10: float | None = None
    adaptive_at5: float | None = None
    adaptive_at10: float | None = None


class LocomoReport(msgspec.Struct, kw_only=True):
    data: str
    embedder: str
    reranker: str | None
    conversations: int
    turns: int
    outcomes: dict[str, int]
    deduplicated: int
    rejected: int
    ingest_seconds: float
    questions_scored: int
    questions_without_evidence: int
    evidence_ids: int
    unanswerable_evidence_ids: int
    unanswerable: list[str]
    fallbacks: int
    p50_ms: dict[str, float]
    reranked_share: dict[str, float] = msgspec.field(default_factory=dict)
    """Per driver with a reranker, the share of its searches that reranked."""
    rows: list[RecallRow]
    hybrid_beats_both: dict[str, bool]


def recall_rows(tally: Tally) -> list[RecallRow]:
    def row(label: str, categories: Sequence[int]) -> RecallRow:
        n = sum(tally.questions[c] for c in categories)
        values = {
            f"{d}_at{k}": round(sum(tally.recall.get(f"{d}@{k}/{c}", 0.0) for c in categories) / n, 4)
            if n
            else 0.0
            for d in tally.drivers()
            for k in KS
        }
        return RecallRow(category=label, questions=n, **values)

    rows = [row(f"{c} {name}", [c]) for c, name in CATEGORIES.items()]
    return [*rows, row("overall", list(CATEGORIES))]


def unanswerable_ids(samples: Sequence[Sample]) -> tuple[int, list[str]]:
    total, missing = 0, []
    for sample in samples:
        known = {t.dia_id for t in sample.turns}
        for q in sample.questions:
            total += len(q.evidence)
            missing += [f"{sample.sample_id}:{e!r}" for e in q.evidence if e not in known]
    return total, missing


def report(
    path: Path, samples: Sequence[Sample], ingested: Ingested, tally: Tally, service: SearchService
) -> LocomoReport:
    rows = recall_rows(tally)
    overall = rows[-1]
    beats = {
        f"at{k}": getattr(overall, f"hybrid_at{k}")
        > max(getattr(overall, f"lexical_at{k}"), getattr(overall, f"vector_at{k}"))
        for k in KS
    }
    total, missing = unanswerable_ids(samples)
    reranker = getattr(service.drivers.get(RERANKED), "reranker", None)
    return LocomoReport(
        data=str(path),
        embedder=service.embedder.model_id if service.embedder is not None else "none",
        reranker=getattr(reranker, "model_id", None),
        conversations=len(samples),
        turns=sum(len(s.turns) for s in samples),
        outcomes=ingested.outcomes,
        deduplicated=ingested.outcomes.get("deduplicated", 0),
        rejected=ingested.outcomes.get("rejected", 0),
        ingest_seconds=round(ingested.seconds, 1),
        questions_scored=overall.questions,
        questions_without_evidence=sum(1 for s in samples for q in s.questions if not q.evidence),
        evidence_ids=total,
        unanswerable_evidence_ids=len(missing),
        unanswerable=missing,
        fallbacks=tally.fallbacks,
        p50_ms={d: round(percentile(tally.latencies.get(d, []), 0.5) * 1000, 2) for d in tally.drivers()},
        reranked_share={
            d: round(tally.reranked[d] / len(tally.latencies[d]), 3)
            for d in tally.drivers()
            if d in (RERANKED, ADAPTIVE)
        },
        rows=rows,
        hybrid_beats_both=beats,
    )


def print_report(r: LocomoReport) -> None:
    out = sys.stdout.write
    out(
        f"memwarden bench locomo — evidence recall, {r.conversations} conversations, {r.turns} turns "
        "(real write path, real search path)\n"
    )
    out(
        f"{'category':16} {'questions':>9} | {'lexical R@5':>11} {'R@10':>6} | {'vector R@5':>10} {'R@10':>6} | "
    )
    out(
        f"{'hybrid R@5':>10} {'R@10':>6}"
        + (f" | {'reranked R@5':>12} {'R@10':>6} | {'adaptive R@5':>12} {'R@10':>6}" if r.reranker else "")
        + "\n"
    )
    for row in r.rows:
        out(
            f"{row.category:16} {row.questions:>9} | {row.lexical_at5:>11.3f} {row.lexical_at10:>6.3f} | "
            f"{row.vector_at5:>10.3f} {row.vector_at10:>6.3f} | {row.hybrid_at5:>10.3f} {row.hybrid_at10:>6.3f}"
        )
        if row.reranked_at5 is not None and row.reranked_at10 is not None:
            out(f" | {row.reranked_at5:>12.3f} {row.reranked_at10:>6.3f}")
        if row.adaptive_at5 is not None and row.adaptive_at10 is not None:
            out(f" | {row.adaptive_at5:>12.3f} {row.adaptive_at10:>6.3f}")
        out("\n")
    out(f"embedder: {r.embedder}; reranker: {r.reranker or 'none'}\n")
    verdict = ", ".join(f"R@{k[2:]} {'yes' if ok else 'NO'}" for k, ok in r.hybrid_beats_both.items())
    out(f"target — hybrid beats both single lanes overall: {verdict}\n")
    out(
        f"ingest: {r.turns} turns in {r.ingest_seconds:.1f} s ({r.turns / max(r.ingest_seconds, 1e-9):.1f} writes/s); "
        f"outcomes {r.outcomes}; {r.deduplicated} deduplicated, {r.rejected} rejected\n"
    )
    out(
        f"questions: {r.questions_scored} scored (categories 1-4); {r.questions_without_evidence} without evidence, "
        "not scored\n"
    )
    out(
        f"evidence ids: {r.evidence_ids}, of which {r.unanswerable_evidence_ids} match no turn "
        f"(unanswerable, counted as not retrieved): {', '.join(r.unanswerable) or '-'}\n"
    )
    p50 = ", ".join(f"{d} {v:.2f} ms" for d, v in r.p50_ms.items())
    out(f"per-query p50 (query embedded on every call): {p50}; driver fallbacks {r.fallbacks}\n")
    if r.reranked_share:
        shares = ", ".join(f"{d} {v:.0%}" for d, v in r.reranked_share.items())
        out(f"searches that reranked: {shares}\n")


def chosen(samples: list[Sample], which: str | None) -> list[Sample]:
    """``all`` the conversations, the ``tuning`` ones or the ``held-out`` ones (``HELD_OUT``)."""
    if which == "tuning":
        return samples[:-HELD_OUT]
    if which == "held-out":
        return samples[-HELD_OUT:]
    return samples


def run_locomo_bench(args: argparse.Namespace) -> int:
    path = Path(args.data) if args.data else DEFAULT_DATA
    if not path.is_file():
        sys.stderr.write(f"no LoCoMo data at {path} (give --data PATH)\n")
        return 2
    samples = chosen(load(path), getattr(args, "conversations", None))
    with (
        scratch_database(f"memwarden_bench_locomo_{os.getpid()}") as (settings, _params),
        Runtime(settings) as runtime,
    ):
        ingested = ingest(runtime, samples)
        catch_up(runtime)
        service = search_service(runtime)
        try:
            tally = score(service, samples, ingested)
        finally:
            service.close()
    result = report(path, samples, ingested, tally, service)
    if args.json:
        sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    else:
        print_report(result)
    return 0
