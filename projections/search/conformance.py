"""The driver conformance kit: six checks any search driver must pass.

1. finds a planted fact        — a distinctive fact in the caller's namespace is in the top 5
2. respects the scoped view     — nothing outside the caller's scope (siblings, descendants,
                                  another tenant, quarantined or retired memories) ever
                                  comes back, even when it matches the query best
3. latency envelope             — p95 over the kit's queries within ``LATENCY_P95_MS``
4. budget discipline            — the returned blocks fit ``token_budget`` (the top hit
                                  alone may exceed it), and at most ``k`` come back
5. read-only                    — the driver changes nothing: ledger head and every read
                                  model's fingerprint are the same afterwards, and it does
                                  not fail inside its READ ONLY transaction
6. deterministic k              — exactly ``k`` results when more match, and the same list
                                  on every call

The kit writes its own corpus through the writer it is given (the real write path:
tests pass ``MemoryService.write``) into namespaces under ``kit-<id>/`` and runs the
driver through the same scoped views the service uses.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol
from uuid import UUID

import msgspec
from psycopg.sql import SQL, Identifier

from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.model.text import estimate_tokens
from memwarden.projections.search.drivers import Driver, SearchRequest
from memwarden.projections.search.service import SearchQuery, SearchService
from memwarden.projections.search.view import Hit
from memwarden.projections.visibility import current

LATENCY_P95_MS = 250.0
PLANTED = "The maintenance window codename for the Kestrel cluster is heliotrope-47."
PLANTED_QUERY = "What is the maintenance window codename for the Kestrel cluster?"
OUTSIDE = "Kestrel cluster maintenance window codename: marigold-12 (sibling team only)."
FILLER_TOPICS = ("deploy", "incident", "backup", "on-call", "review", "release", "budget", "hiring")
FILLER_PLACES = ("Lisbon", "Oslo", "Austin", "Kyoto", "Nairobi", "Lima")


class CheckResult(msgspec.Struct, frozen=True):
    name: str
    passed: bool
    detail: str


class ConformanceReport(msgspec.Struct, frozen=True):
    driver: str
    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


class Written(Protocol):
    """What the kit needs of a write's result."""

    @property
    def id(self) -> UUID | None: ...

    @property
    def position(self) -> int: ...


Writer = Callable[[Identity, WriteMemory], Written]
"""Writes one memory for an identity (the real write path) and tells its id and position."""


class KitCorpus(msgspec.Struct, frozen=True, kw_only=True):
    caller: Identity
    planted: UUID
    outside: list[UUID]
    position: int


def build_corpus(write: Writer, prefix: str) -> KitCorpus:
    """The kit's memories: a planted fact in the caller's namespace, the same words in
    namespaces the caller must not see, and filler everywhere."""
    caller = Identity(namespace=f"{prefix}/eng/alpha", actor="kit-agent", role="agent")
    sibling = Identity(namespace=f"{prefix}/eng/beta", actor="kit-agent", role="agent")
    child = Identity(namespace=f"{prefix}/eng/alpha/sub", actor="kit-agent", role="agent")
    stranger = Identity(namespace=f"other-{prefix}/eng/alpha", actor="kit-agent", role="agent")
    parent = Identity(namespace=f"{prefix}/eng", actor="kit-agent", role="agent")
    planted = write(caller, WriteMemory(content=PLANTED))
    outside = [write(who, WriteMemory(content=OUTSIDE)).id for who in (sibling, child, stranger)]
    n = 0
    for who in (caller, parent, sibling, child):
        for topic in FILLER_TOPICS:
            for place in FILLER_PLACES:
                n += 1
                write(
                    who,
                    WriteMemory(
                        content=f"The {topic} notes for the {place} office mention item {n} of the plan."
                    ),
                )
    last = write(caller, WriteMemory(content="Kit corpus complete."))
    assert planted.id is not None
    return KitCorpus(
        caller=caller, planted=planted.id, outside=[i for i in outside if i], position=last.position
    )


class ConformanceKit:
    def __init__(self, search: SearchService, corpus: KitCorpus) -> None:
        self.search = search
        self.corpus = corpus

    def run(self, driver: Driver) -> ConformanceReport:
        self.search.wait_for(self.corpus.position)
        checks = [
            self._guarded("finds a planted fact", lambda: self._finds_planted(driver)),
            self._guarded("respects the scoped view", lambda: self._respects_scope(driver)),
            self._guarded("latency envelope", lambda: self._latency(driver)),
            self._guarded("budget discipline", lambda: self._budget(driver)),
            self._guarded("read-only", lambda: self._read_only(driver)),
            self._guarded("deterministic k", lambda: self._deterministic_k(driver)),
        ]
        return ConformanceReport(driver=driver.name, checks=checks)

    # -- running the driver the way the service does ---------------------------------------------

    def _run(self, driver: Driver, query: str, k: int = 10, budget: int | None = None) -> list[Hit]:
        q = SearchQuery(query=query, k=k, token_budget=budget)
        serving = self.search.serving()
        with self.search.view(self.corpus.caller, q, self.search.embed_later(query, serving), serving) as (
            view,
            *_,
        ):
            return driver.search(view, SearchRequest(query=query, k=k, token_budget=budget))

    @staticmethod
    def _guarded(name: str, check: Callable[[], tuple[bool, str]]) -> CheckResult:
        try:
            passed, detail = check()
        except Exception as error:  # noqa: BLE001 - a failing driver is a failed check, with its reason
            return CheckResult(
                name, passed=False, detail=f"driver failed: {type(error).__name__}: {error}"[:300]
            )
        return CheckResult(name, passed=passed, detail=detail)

    # -- the checks -----------------------------------------------------------------------------------

    def _finds_planted(self, driver: Driver) -> tuple[bool, str]:
        refs = [h.ref for h in self._run(driver, PLANTED_QUERY, k=5)]
        found = self.corpus.planted in refs
        return (
            found,
            f"planted fact at rank {refs.index(self.corpus.planted) + 1}"
            if found
            else f"not in {len(refs)} results",
        )

    def _visible(self) -> set[UUID]:
        """What the caller may see, computed independently of any driver."""
        scope = list(ancestors(self.corpus.caller.namespace))
        with self.search.ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL(f"SELECT id FROM {{s}}.memory_objects WHERE namespace = ANY(%s) AND {current()}").format(
                    s=Identifier(self.search.ledger.schema)
                ),
                (scope,),
            ).fetchall()
        return {r["id"] for r in rows}

    def _respects_scope(self, driver: Driver) -> tuple[bool, str]:
        visible = self._visible()
        leaked: set[UUID] = set()
        for query in (PLANTED_QUERY, OUTSIDE, "marigold-12 sibling team only", "deploy notes Lisbon office"):
            leaked |= {h.ref for h in self._run(driver, query, k=20)} - visible
        if leaked:
            return False, f"{len(leaked)} references outside the caller's scope"
        return True, "every reference inside the scope"

    def _latency(self, driver: Driver) -> tuple[bool, str]:
        timings = []
        for n, topic in enumerate(FILLER_TOPICS * 4):
            began = time.perf_counter()
            self._run(
                driver, f"what did the {topic} notes say about {FILLER_PLACES[n % len(FILLER_PLACES)]}", k=10
            )
            timings.append((time.perf_counter() - began) * 1000)
        p95 = statistics.quantiles(timings, n=20)[-1]
        return (
            p95 <= LATENCY_P95_MS,
            f"p95 {p95:.1f} ms over {len(timings)} queries (envelope {LATENCY_P95_MS:.0f} ms)",
        )

    def _budget(self, driver: Driver) -> tuple[bool, str]:
        contents = self._contents()
        for budget in (1, 20, 60):
            hits = self._run(driver, "deploy notes office plan", k=10, budget=budget)
            tokens = sum(estimate_tokens(contents.get(h.ref)) for h in hits)
            if len(hits) > 10 or (len(hits) > 1 and tokens > budget):
                return False, f"budget {budget}: {len(hits)} results, {tokens} tokens"
        return True, "results fit the budget (the top hit kept)"

    def _read_only(self, driver: Driver) -> tuple[bool, str]:
        before = self._fingerprint()
        self._run(driver, PLANTED_QUERY, k=10)
        self._run(driver, "deploy notes", k=10, budget=30)
        after = self._fingerprint()
        if before != after:
            changed = [name for name in before if before[name] != after.get(name)]
            return False, f"changed: {', '.join(changed)}"
        return True, "ledger and read models unchanged"

    def _deterministic_k(self, driver: Driver) -> tuple[bool, str]:
        for k in (1, 3, 7):
            first = self._run(driver, "notes for the office mention item of the plan", k=k)
            second = self._run(driver, "notes for the office mention item of the plan", k=k)
            if len(first) != k:
                return False, f"k={k}: {len(first)} results although more match"
            if [h.ref for h in first] != [h.ref for h in second]:
                return False, f"k={k}: two calls gave different results"
        return True, "exactly k, the same every time"

    # -- helpers --------------------------------------------------------------------------------------

    def _contents(self) -> dict[UUID, str]:
        with self.search.ledger.datastore.get_connection() as conn:
            rows = conn.execute(
                SQL("SELECT id, content FROM {s}.memory_objects").format(
                    s=Identifier(self.search.ledger.schema)
                )
            ).fetchall()
        return {r["id"]: r["content"] for r in rows}

    def _fingerprint(self) -> dict[str, Any]:
        s = Identifier(self.search.ledger.schema)
        tables = (
            "memory_objects",
            "search_docs",
            "search_postings",
            "search_terms",
            "search_stats",
            "memory_access",
        )
        with self.search.ledger.datastore.get_connection() as conn:
            found: dict[str, Any] = {"ledger head": self.search.ledger.head_position()}
            for table in tables:
                row = conn.execute(
                    SQL(
                        "SELECT count(*) AS n, md5(string_agg(t::text, '|' ORDER BY t::text)) AS h FROM {s}.{t} t"
                    ).format(s=s, t=Identifier(table))
                ).fetchone()
                found[table] = (row["n"], row["h"]) if row else None
        return found
