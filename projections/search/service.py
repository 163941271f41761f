"""``search``: open a scoped view, run the namespace's driver, degrade when a part fails.

- The query is embedded on a worker thread while the view opens and the lexical lane
  runs, so the embedder's time overlaps the database's.
- Embedder down → the lexical driver, ``degraded`` and ``driver=lexical-degraded``.
- The policy's driver fails → the baseline driver, and the answer names both.
- Each attempt runs in its own READ ONLY transaction; results are hydrated inside the
  caller's scope again, so even a misbehaving driver cannot return what the caller may
  not see.
- The vector lane serves the model the index serves (``serving``: the latest adopted, see
  projections/search/projection.py), looked up every few seconds, and the query is
  embedded by that model's embedder, whatever ``MEMWARDEN_EMBEDDER`` says: a process
  configured with a new embedder keeps searching the old vectors until the switch.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import msgspec
import numpy as np
from psycopg import Connection

from memwarden.domain.cache import TTLCache
from memwarden.domain.embedding import Embedder, EmbedderUnavailable, embed_one, embedder_for_model
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import ancestors
from memwarden.projections.memory_objects.views import ProvenanceView
from memwarden.projections.search.drivers import (
    BASELINE,
    Driver,
    LexicalDriver,
    SearchRequest,
    policy_drivers,
)
from memwarden.projections.search.projection import serving_of
from memwarden.projections.search.stages import add, stage
from memwarden.projections.search.view import Hit, ReadFilter, ScopedView, ScopeSizes, open_view
from memwarden.projections.timeline.views import position_at

log = logging.getLogger(__name__)
MAX_K = 100
MAX_QUERY_CHARS = 2_000
MAX_TOKEN_BUDGET = 1_000_000
EMBED_TIMEOUT_SECONDS = 5.0
DEGRADED = "lexical-degraded"
SERVING_SECONDS = 2.0
"""How long a process trusts the served model it looked up (the switch is seen that late)."""


@dataclass(frozen=True)
class Serving:
    """The model the vector lane serves and the embedder of its queries (None: this process
    cannot make that model's vectors; ``model`` None: no vectors at all)."""

    model: tuple[str, int] | None
    embedder: Embedder | None


class SearchTerms(msgspec.Struct, frozen=True, kw_only=True):
    """What a search asks for besides its times: shared by the query (``SearchQuery``) and
    its wire form (api/http/schemas.py ``SearchBody``), so a field is declared once."""

    query: str
    k: int = 10
    token_budget: int | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    include_retired: bool = False


class SearchQuery(SearchTerms, frozen=True, kw_only=True):
    as_of: datetime | None = None
    valid_at: datetime | None = None

    @classmethod
    def of(cls, terms: SearchTerms, as_of: datetime | None, valid_at: datetime | None) -> SearchQuery:
        """``terms`` (any ``SearchTerms``, a wire body too) at these times."""
        fields = {name: getattr(terms, name) for name in SearchTerms.__struct_fields__}
        return cls(**fields, as_of=as_of, valid_at=valid_at)


class SearchResult(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    content: str | None
    score: float
    type: str
    status: str
    trust_tier: str
    recorded_at: datetime
    valid_from: datetime
    valid_to: datetime | None
    provenance: list[ProvenanceView]


class SearchAnswer(msgspec.Struct, frozen=True, kw_only=True):
    results: list[SearchResult]
    driver: str
    degraded: bool = False


def check_query(q: SearchQuery) -> None:
    if not q.query.strip():
        raise InvalidRequest("query must not be empty")
    if len(q.query) > MAX_QUERY_CHARS:
        raise InvalidRequest(f"query longer than {MAX_QUERY_CHARS} characters")
    if not 1 <= q.k <= MAX_K:
        raise InvalidRequest(f"k must be between 1 and {MAX_K}")
    if q.token_budget is not None and not 1 <= q.token_budget <= MAX_TOKEN_BUDGET:
        raise InvalidRequest(f"token_budget must be between 1 and {MAX_TOKEN_BUDGET}")
    for name in ("as_of", "valid_at"):
        moment = getattr(q, name)
        if moment is not None and moment.tzinfo is None:
            raise InvalidRequest(f"{name} needs a time zone")


class SearchService:
    def __init__(
        self,
        ledger: Ledger,
        embedder: Embedder | None,
        wait_for: Callable[[int | None], None],
        drivers: dict[str, Driver] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ledger = ledger
        self._configured = embedder
        self.wait_for = wait_for
        self.drivers = drivers or policy_drivers()
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="embed")
        self._sizes = ScopeSizes(5.0, max_items=10_000)
        self._serving: TTLCache[str, Serving] = TTLCache(SERVING_SECONDS, max_items=4)
        self._embedders: dict[str, Embedder | None] = {}

    @property
    def embedder(self) -> Embedder | None:
        """The configured embedder (``MEMWARDEN_EMBEDDER``): queries use it once the index
        serves its model (``serving``)."""
        return self._configured

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self._configured = embedder
        self._serving.clear()

    @property
    def vector_model(self) -> tuple[str, int] | None:
        return self.serving().model

    def serving(self) -> Serving:
        """The served model (the ledger's fact, from the index; the configured embedder's on
        an index with no vector yet) and its embedder, looked up every few seconds."""
        found = self._serving.get("")
        if found is not None:
            return found
        with self.ledger.datastore.get_connection() as conn, conn.cursor() as curs:
            model = serving_of(curs, self.ledger.schema)
        configured = self.embedder
        if configured is None:  # MEMWARDEN_EMBEDDER=none: lexical by design
            model = None
        elif model is None:
            model = (configured.model_id, configured.dimensions)
        found = Serving(model, self._embedder_for(model[0]) if model is not None else None)
        self._serving.put("", found)
        return found

    def write_embedder(self) -> Embedder | None:
        """What a new memory is embedded by: the served model's embedder (its vector is
        searched at once), else the configured one (its vector waits for the switch)."""
        return self.serving().embedder or self.embedder

    def _embedder_for(self, model: str) -> Embedder | None:
        configured = self.embedder
        if configured is not None and configured.model_id == model:
            return configured
        if model not in self._embedders:
            try:
                self._embedders[model] = embedder_for_model(model)
            except (ValueError, OSError):
                log.exception("cannot make an embedder of the served model %s", model)
                self._embedders[model] = None
        return self._embedders[model]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the syscall ----------------------------------------------------------------------------

    def search(
        self, identity: Identity, q: SearchQuery, driver_name: str | None = None, after: int | None = None
    ) -> SearchAnswer:
        check_query(q)
        self.wait_for(after)
        request = SearchRequest(query=q.query, k=q.k, token_budget=q.token_budget)
        serving = self.serving()
        vector = self.embed_later(q.query, serving)
        name = driver_name or BASELINE
        driver = self.drivers.get(name, self.drivers[BASELINE])
        if vector is None:
            if serving.model is not None:  # vectors this process cannot match: degraded
                return self._answer(identity, q, None, LexicalDriver(), request, DEGRADED, degraded=True)
            driver = LexicalDriver()  # configured without an embedder: lexical by design, not degraded
        try:
            return self._answer(identity, q, vector, driver, request, driver.name, serving)
        except EmbedderUnavailable:
            log.warning("embedder unavailable; search degrades to lexical")
            return self._answer(identity, q, None, LexicalDriver(), request, DEGRADED, degraded=True)
        except Exception:
            if name == BASELINE:
                raise
            log.exception("driver %s failed; falling back to the baseline driver", name)
            fallback = self.drivers[BASELINE]
            label = f"{fallback.name} (fallback from {name})"
            return self._answer(identity, q, vector, fallback, request, label, serving)

    def embed_later(
        self, text: str, serving: Serving | None = None
    ) -> Callable[[], np.ndarray[Any, Any]] | None:
        """Start embedding ``text`` now by the served model (``serving``: as looked up by the
        caller, who opens its view with it); the returned callable waits for it (or raises
        ``EmbedderUnavailable``)."""
        embedder = (serving or self.serving()).embedder
        if embedder is None:
            return None
        future: Future[tuple[np.ndarray[Any, Any], float]] = self._pool.submit(
            _timed_embedding, embedder, text
        )

        def result() -> np.ndarray[Any, Any]:
            try:
                vector, seconds = future.result(timeout=EMBED_TIMEOUT_SECONDS)
            except FutureTimeout as error:
                raise EmbedderUnavailable("the embedder did not answer in time") from error
            add("embedding (its own thread)", seconds)
            return vector

        return result

    def _answer(
        self,
        identity: Identity,
        q: SearchQuery,
        vector: Callable[[], np.ndarray[Any, Any]] | None,
        driver: Driver,
        request: SearchRequest,
        label: str,
        serving: Serving | None = None,
        *,
        degraded: bool = False,
    ) -> SearchAnswer:
        with self.view(identity, q, vector, serving) as (view, *_):
            hits = driver.search(view, request)
            with stage("hydrate"):
                results = hydrate(view, hits[: request.k], last=True)
        return SearchAnswer(results=results, driver=label, degraded=degraded)

    # -- views ----------------------------------------------------------------------------------

    def read_filter(self, conn: Connection[Any], q: SearchQuery) -> ReadFilter:
        now = self.clock()
        position = None
        if q.as_of is not None:
            position = position_at(conn, self.ledger.schema, q.as_of, self.ledger.head_position())
        return ReadFilter(
            now=now,
            include_retired=q.include_retired,
            position=position,
            valid_at=q.valid_at or q.as_of,
            tags=q.tags,
            selectors=q.selectors,
        )

    @contextlib.contextmanager
    def view(
        self,
        identity: Identity,
        q: SearchQuery,
        vector: Callable[[], np.ndarray[Any, Any]] | None,
        serving: Serving | None = None,
    ) -> Iterator[tuple[ScopedView, Connection[Any], tuple[str, ...], list[UUID]]]:
        """A scoped view in its own READ ONLY transaction, whose vector lane compares
        ``vector`` with the vectors of the served model (``serving``: the one ``vector`` was
        made by; default: the one served now)."""
        scope = ancestors(identity.namespace)
        with (
            self.ledger.datastore.get_connection() as conn,
            open_view(conn, self.ledger.schema, scope) as shared,
        ):
            where = self.read_filter(conn, q)
            model = (serving or self.serving()).model if vector is not None else None
            yield (
                ScopedView(
                    conn, self.ledger.schema, scope, shared, where, q.query, vector, model, self._sizes
                ),
                conn,
                scope,
                shared,
            )


def _timed_embedding(embedder: Embedder, text: str) -> tuple[np.ndarray[Any, Any], float]:
    began = time.perf_counter()
    vector = embed_one(embedder, text)
    return vector, time.perf_counter() - began


def hydrate(view: ScopedView, hits: Sequence[Hit], *, last: bool = False) -> list[SearchResult]:
    """Hits → results, in the driver's order, keeping only what the view lets through (its
    scope and read filter, again: a misbehaving driver cannot widen it). A row the view read
    already (the reranker's passages) is not read again. ``last``: the view's last read (its
    transaction ends with it, in the same round trip)."""
    if not hits:
        return []
    rows = view.memory_rows([h.ref for h in hits], last=last)
    return [
        msgspec.convert({**rows[h.ref], "score": round(h.score, 6)}, SearchResult)
        for h in hits
        if h.ref in rows
    ]
