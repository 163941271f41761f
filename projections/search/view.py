"""The scoped view: everything a search driver may see, and nothing more.

A driver never gets a connection. It gets a ``ScopedView`` bound to one caller's scope
(the namespace and its ancestors as an enumerated list, plus memories shared into it),
to the read filters (current only unless ``include_retired``, as-of/valid-at, tags,
selectors), and to one READ ONLY transaction. It asks for lane candidates and token
estimates and returns references; the service turns references into results.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
import numpy as np
from psycopg import Connection
from psycopg.sql import SQL, Composed, Identifier, Literal

from memwarden.domain.cache import TTLCache
from memwarden.domain.model.text import estimate_tokens
from memwarden.projections.search.halfvec import HalfvecParam, bind_halfvec_arrays
from memwarden.projections.search.lexical import K1, B, query_terms
from memwarden.projections.search.projection import KNOWLEDGE, MEMORY
from memwarden.projections.visibility import current, known_at

EF_SEARCH = 120
"""Near the exact scan's top-10 lists (docs/design-figures.md, Search), and no fewer than the
vector lane fetches for a search of ten (``candidates_for(10) * OVERFETCH``): a walk asked for
more rows than ``ef_search`` goes on iterating, which costs more than a wider first walk and
finds fewer of the true nearest."""
MAX_SCAN_TUPLES = 50_000
EXACT_SCAN_MAX = 20_000  # measured: an exact scan of a scope beats a filtered HNSW walk up to here
# ... unless the scope is most of what the index holds: the walk's filter then drops few
# candidates and visits a few hundred documents where an exact scan computes every distance
# (docs/design-figures.md, Search). Small scopes stay
# exact: they are as fast that way, and exact.
HNSW_MIN_SCOPE = 2_000
HNSW_MIN_SHARE = 0.25
OVERFETCH = 3
MIN_FETCH = 40
IN_MEMORY_MIN_QUERIES = 8
"""From this many query vectors on, lanes may be computed in memory (``_in_memory``)."""
IN_MEMORY_DOCS_PER_QUERY = 300
"""A scope that the HNSW graph would walk is read whole for at most this many documents a query."""
MAX_FETCH = 100_000
# One round trip when a view opens (its BEGIN included): read-only, on one snapshot (every statement of a search
# sees the same memories, so a row read once serves every stage after it); an HNSW scan that keeps walking the graph
# while the scope filter drops candidates (pgvector >= 0.8 iterative scans); and generic
# plans for the prepared lane queries (planning them for each search cost nearly as much as
# running them on a small scope).
OPEN_VIEW = (
    "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY;"
    " SET LOCAL hnsw.iterative_scan = relaxed_order;"
    f" SET LOCAL hnsw.ef_search = {EF_SEARCH}; SET LOCAL hnsw.max_scan_tuples = {MAX_SCAN_TUPLES};"
    " SET LOCAL plan_cache_mode = force_generic_plan"
)


MEMORY_COLUMNS = (
    "m.id, m.namespace, m.content, m.type, m.status, m.trust_tier, m.recorded_at, m.valid_from,"
    " m.valid_to, m.provenance"
)
"""What a view reads of a memory: all a search result shows (``memory_rows``)."""


@contextlib.contextmanager
def open_view(conn: Connection[Any], schema: str, scope: Sequence[str]) -> Iterator[list[UUID]]:
    """A view's transaction (``OPEN_VIEW``) on ``conn`` (autocommit: the pool's), for the
    block; yields which memories are shared into ``scope`` (projections/governance/views.py
    ``shared_into``). Begun, set up and the shares read in one round trip: the statements go
    together, so the scope is a literal, not a parameter."""
    if not conn.autocommit:  # a BEGIN inside a transaction would be ignored: not read-only
        raise ValueError("a view opens its own transaction: the connection must be in autocommit")
    cursor = conn.execute(
        SQL(OPEN_VIEW + "; SELECT DISTINCT memory_id FROM {s}.shares WHERE namespace = ANY({scope})").format(
            s=Identifier(schema), scope=Literal(list(scope))
        )
    )
    try:
        while cursor.nextset():
            pass  # BEGIN and the SETs answer nothing; the last result is the shares'
        shared = [row["memory_id"] for row in cursor.fetchall()]
        yield shared
    except BaseException:
        if not conn.closed:
            conn.rollback()
        raise
    # Read only: a commit ends it like a rollback, and keeps the connection's prepared
    # statements (psycopg forgets them all at a rollback).
    conn.commit()


class Hit(msgspec.Struct, frozen=True):
    """A reference a driver returns: what, and how well it matched (driver's own scale)."""

    ref: UUID
    score: float


class ReadFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which memories a search may see, besides the scope."""

    now: datetime
    include_retired: bool = False
    position: int | None = None  # as known at this ledger position (as_of)
    valid_at: datetime | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()


QueryVector = Callable[[], "np.ndarray[Any, Any]"]


ScopeSizes = TTLCache[tuple[str, ...], int]
"""Recent scope sizes, per process. A size only picks the vector lane's plan (exact scan or
HNSW walk), never what is visible, so a value a few seconds old is good enough and saves a
round trip on most searches."""


class ScopedView:
    """Read-only, scoped access to the search index (see the module docstring)."""

    def __init__(
        self,
        conn: Connection[Any],
        schema: str,
        scope: Sequence[str],
        shared: Sequence[UUID],
        where: ReadFilter,
        query: str,
        query_vector: QueryVector | None,
        vector_model: tuple[str, int] | None,
        sizes: ScopeSizes | None = None,
    ) -> None:
        self._conn = conn
        self._sizes = sizes
        self._s = Identifier(schema)
        self._params: dict[str, Any] = {
            "scope": list(scope),
            "shared": list(shared),
            "now": where.now,
            "p": where.position,
            "v": where.valid_at or where.now,
            "tags": list(where.tags),
            "selectors": list(where.selectors),
        }
        self._where = where
        self.query = query
        self._query_vector = query_vector
        self._vector_model = vector_model
        self._query_bound: HalfvecParam | None = None
        self.rows_read: dict[UUID, dict[str, Any]] = {}
        """Memory rows this view has read and let through (``memory_rows``), by id: one
        snapshot (``OPEN_VIEW``), so they hold for the view's whole life."""
        self._ended = False
        self._nearby: dict[int, dict[UUID, list[tuple[UUID, int]]]] = {}
        """Write-order neighbours this view has read (``neighbours``), by span and memory:
        the same snapshot, so they too hold for the view's whole life."""

    @property
    def has_vectors(self) -> bool:
        return self._query_vector is not None and self._vector_model is not None

    def query_vector(self) -> np.ndarray[Any, Any]:
        """The query's embedding; raises ``EmbedderUnavailable`` when the embedder failed."""
        if self._query_vector is None:
            raise LookupError("no embedder configured")
        return self._query_vector()

    def for_vector(self, vector: np.ndarray[Any, Any]) -> ScopedView:
        """This view (its transaction, scope and filters) with another query vector: the
        autopilot looks up the neighbours of a writer's memories in one view."""
        other = copy.copy(self)
        other._query_vector = lambda: vector
        other._query_bound = None
        return other

    def _query_param(self) -> HalfvecParam:
        """The query vector as a bound parameter, made once however many lanes use it."""
        if self._query_bound is None:
            self._query_bound = HalfvecParam(self.query_vector())
        return self._query_bound

    # -- lanes --------------------------------------------------------------------------------

    def vector_lane(self, k: int, context: int = 0) -> list[Hit]:
        """The ``k`` nearest memories by cosine similarity, best first.

        A small scope is scanned exactly through the namespace index; a large one, or one
        that holds most of the index, walks the HNSW graph, filtering by scope as it goes
        (``exact_scan``). ``context``: the same statement also reads the hits' write-order
        neighbours up to that far (``neighbours`` then answers from them)."""
        candidates = self._vector_candidates(SQL("%(q)s"))
        if candidates is None:
            return []
        hits = self._visible_top(candidates, {"q": self._query_param()}, k, context)
        return sorted(hits, key=lambda h: (-h.score, h.ref))  # relaxed order: put it right

    def vector_lanes(self, vectors: Sequence[np.ndarray[Any, Any]], k: int) -> list[list[Hit]]:
        """``vector_lane`` for several query vectors in one round trip (a batch of writes
        looking for their neighbours): the ``k`` nearest visible memories of each, best
        first, in the order of ``vectors``. A vector whose candidates were mostly invisible
        is looked up again on its own, with the lane's deeper fetches."""
        if self._vector_model is None or not vectors:
            return [[] for _ in vectors]
        if self._in_memory(len(vectors)):
            return self._vector_lanes_in_memory(vectors, k)
        candidates = self._vector_candidates(SQL("q.v"))
        assert candidates is not None  # a vector model, checked above
        fetch = max(k * OVERFETCH, MIN_FETCH)
        with self._conn.cursor() as curs:
            bind_halfvec_arrays(curs)
            rows = curs.execute(
                SQL(
                    "SELECT q.i, c.ref, c.score, c.fetched, v.visible"
                    " FROM unnest(%(qs)b::halfvec[]) WITH ORDINALITY AS q(v, i)"
                    " CROSS JOIN LATERAL (SELECT x.ref, x.score, count(*) OVER () AS fetched"
                    " FROM ({candidates} LIMIT {fetch}) x) c"
                    " LEFT JOIN LATERAL (SELECT true AS visible FROM {s}.memory_objects m"
                    " WHERE m.id = c.ref AND {visible} LIMIT 1) v ON true"
                ).format(candidates=candidates, fetch=Literal(fetch), s=self._s, visible=self._visible()),
                self._params | {"qs": [HalfvecParam(v) for v in vectors]},
            ).fetchall()
        found: list[list[Hit]] = [[] for _ in vectors]
        fetched = [0] * len(vectors)
        for r in rows:  # every candidate, so that one none of whose is visible still counts them
            fetched[r["i"] - 1] = int(r["fetched"])
            if r["visible"]:
                found[r["i"] - 1].append(Hit(r["ref"], float(r["score"])))
        return [
            sorted(hits, key=lambda h: (-h.score, h.ref))[:k]
            if len(hits) >= k or fetched[i] < fetch
            else self.for_vector(vectors[i]).vector_lane(k)
            for i, hits in enumerate(found)
        ]

    def _in_memory(self, queries: int) -> bool:
        """Whether ``queries`` lanes cost less computed here than in the database: one read of
        the scope's vectors against a graph walk or an exact scan per query
        (docs/design-figures.md, Search)."""
        if queries < IN_MEMORY_MIN_QUERIES:
            return False
        scope = self.scope_size()
        return scope <= EXACT_SCAN_MAX and (self.exact_scan() or scope <= queries * IN_MEMORY_DOCS_PER_QUERY)

    def _vector_lanes_in_memory(self, vectors: Sequence[np.ndarray[Any, Any]], k: int) -> list[list[Hit]]:
        """``vector_lanes`` of an exactly scanned scope, computed here: the scope's visible
        vectors read once, every query's cosines one matrix product. The database would
        compute each pair's distance in a function call of its own."""
        assert self._vector_model is not None
        model, dims = self._vector_model
        with self._conn.cursor(binary=True) as curs:
            rows = curs.execute(
                SQL(
                    "SELECT d.ref, d.embedding::halfvec({d}) AS embedding FROM {s}.search_docs d"
                    " JOIN {s}.memory_objects m ON m.id = d.ref"
                    " WHERE d.model = {model} AND d.kind = {kind} AND {scope} AND {visible}"
                ).format(
                    d=Literal(dims),
                    s=self._s,
                    model=Literal(model),
                    kind=Literal(MEMORY),
                    scope=self._scope("d.namespace", "d.ref"),
                    visible=self._visible(),
                ),
                self._params,
            ).fetchall()
        if not rows:
            return [[] for _ in vectors]
        refs = [r["ref"] for r in rows]
        scores = _cosines(np.stack([np.asarray(v) for v in vectors]), _halfvec_rows(rows, dims))
        width = min(k, len(refs))
        lanes: list[list[Hit]] = []
        for row in scores:
            best = np.argpartition(-row, width - 1)[:width] if width < len(refs) else np.arange(len(refs))
            hits = [Hit(refs[j], float(row[j])) for j in best]
            lanes.append(sorted(hits, key=lambda h: (-h.score, h.ref)))
        return lanes

    def _vector_candidates(self, query: SQL) -> Composed | None:
        """Every memory vector of the view's model in scope, as (ref, score) nearest to the
        ``query`` vector first (SQL naming it: a placeholder, or a column of an outer row);
        None without a vector model."""
        if self._vector_model is None:
            return None
        model, dims = self._vector_model
        distance = SQL("d.embedding::halfvec({d}) <=> {q}::halfvec({d})").format(d=Literal(dims), q=query)
        # The model is a literal: the HNSW index is partial per model, and a generic plan
        # (OPEN_VIEW) cannot match a bound parameter to the index's predicate.
        return SQL(
            "SELECT d.ref, 1 - ({distance}) AS score FROM {s}.search_docs d"
            " WHERE d.model = {model} AND d.kind = {kind} AND {scope} ORDER BY {order}"
        ).format(
            distance=distance,
            s=self._s,
            model=Literal(model),
            kind=Literal(MEMORY),
            scope=self._scope("d.namespace", "d.ref"),
            # "+ 0" hides the expression from the HNSW index: the planner scans the scope
            order=SQL("({}) + 0").format(distance) if self.exact_scan() else distance,
        )

    def lexical_lane(self, k: int, context: int = 0) -> list[Hit]:
        """The ``k`` best memories by BM25 over the query's terms, best first; ``context``:
        with their write-order neighbours, as ``vector_lane``."""
        terms = query_terms(self.query)
        if not terms:
            return []
        candidates = self._bm25(MEMORY, self._scope("p.namespace", "p.ref"))
        return self._visible_top(candidates, {"terms": terms}, k, context)

    def neighbours(self, refs: Sequence[UUID], span: int) -> list[tuple[UUID, UUID, int]]:
        """``(ref, neighbour, distance)``: the memories written at most ``span`` places before
        or after each of ``refs`` in its namespace (the index's write order), those this view
        lets through. Memories written one after another (a conversation's turns) are each
        other's context: the hybrid driver lends a neighbour part of a hit's score.

        What a lane read with its hits (its ``context``) is not read again: one snapshot."""
        if not refs or span < 1:
            return []
        wanted = list(dict.fromkeys(refs))
        known = self._nearby.setdefault(span, {})
        missing = [ref for ref in wanted if ref not in known]
        if missing:
            rows = self._fetch(
                SQL(_NEIGHBOURS).format(
                    s=self._s,
                    kind=Literal(MEMORY),
                    span=Literal(span),
                    scope=self._scope("m.namespace", "m.id"),
                    visible=self._visible(),
                ),
                {"refs": missing},
            )
            self._remember_neighbours(span, missing, rows)
        return [(ref, near, distance) for ref in wanted for near, distance in known[ref]]

    def _remember_neighbours(
        self, span: int, sources: Sequence[UUID], rows: Sequence[dict[str, Any]]
    ) -> None:
        """Keep the neighbours ``rows`` (source, ref, distance) of ``sources`` (each of them,
        also one without any) for ``neighbours``."""
        known = self._nearby.setdefault(span, {})
        for source in sources:
            known[source] = []
        for r in rows:
            known[r["source"]].append((r["ref"], int(r["distance"])))

    def exact_scan(self) -> bool:
        """Whether the vector lane scans the scope exactly instead of walking the HNSW graph
        (see ``HNSW_MIN_SHARE``)."""
        scope = self.scope_size()
        if scope > EXACT_SCAN_MAX:
            return False
        if scope <= HNSW_MIN_SCOPE:
            return True
        return scope < HNSW_MIN_SHARE * self._documents(None)

    def scope_size(self) -> int:
        """How many documents the caller's scope holds (from the index's statistics)."""
        return self._documents(tuple(self._params["scope"])) + len(self._params["shared"])

    def _documents(self, scope: tuple[str, ...] | None) -> int:
        """Memory documents in ``scope``'s namespaces, or in the whole index (``None``);
        recent answers come from the per-process cache."""
        key = scope if scope is not None else ()
        docs = self._sizes.get(key) if self._sizes is not None else None
        if docs is None:
            where = SQL(" AND namespace = ANY(%(scope)s)") if scope is not None else SQL("")
            rows = self._fetch(
                SQL(
                    "SELECT coalesce(sum(docs), 0) AS n FROM {s}.search_stats WHERE kind = {kind}{where}"
                ).format(s=self._s, kind=Literal(MEMORY), where=where),
                {},
            )
            docs = int(rows[0]["n"])
            if self._sizes is not None:
                self._sizes.put(key, docs)
        return docs

    def _visible_top(
        self, candidates: Composed, params: dict[str, Any], k: int, context: int = 0
    ) -> list[Hit]:
        """The best ``k`` of ``candidates`` (ref, score; best first) that the read filter
        lets through. Candidates are ranked inside the scope first, then only the few best
        are checked against ``memory_objects``; if too many of them are not visible (retired,
        filtered by tags), more are fetched. Each candidate is checked by its key (a lateral
        probe): joined as a set, the vector lane's candidates were hashed against a sequential
        scan of every memory. ``context`` > 0: the same statement also reads the write-order
        neighbours of the hits whose neighbours this view does not know yet (``neighbours``),
        so a search asks for them in no statement of their own."""
        fetch = max(k * OVERFETCH, MIN_FETCH)
        known = set(self._nearby.get(context, {})) if context > 0 else set()
        while True:
            # The limits are literals: plans are generic (OPEN_VIEW), and a generic plan that
            # knows how many rows are wanted walks the HNSW index instead of guessing.
            top = SQL(
                "WITH c AS MATERIALIZED ({candidates} LIMIT {fetch}),"
                " top AS MATERIALIZED (SELECT c.ref, c.score, (SELECT count(*) FROM c) AS fetched, v.visible"
                " FROM c LEFT JOIN LATERAL"
                " (SELECT true AS visible FROM {s}.memory_objects m WHERE m.id = c.ref AND {visible}"
                " LIMIT 1) v ON true"
                " ORDER BY v.visible IS NULL, c.score DESC, c.ref LIMIT {k})"
            ).format(
                candidates=candidates,
                s=self._s,
                visible=self._visible(),
                fetch=Literal(fetch),
                k=Literal(k),
            )
            if context > 0:
                query = SQL("{top} " + _TOP_WITH_NEIGHBOURS).format(
                    top=top,
                    s=self._s,
                    kind=Literal(MEMORY),
                    span=Literal(context),
                    scope=self._scope("m.namespace", "m.id"),
                    visible=self._visible(),
                )
                rows = self._fetch(query, params | {"known": list(known)})
            else:
                rows = self._fetch(SQL("{top} " + _TOP).format(top=top), params)
            # Every candidate comes back, the visible first, so that a fetch none of whose
            # candidates is visible still says whether there are more to fetch.
            ranked = [r for r in rows if r["neighbour"] is None]
            ranked.sort(key=lambda r: (not r["visible"], -r["score"], r["ref"]))
            hits = [Hit(r["ref"], float(r["score"])) for r in ranked if r["visible"]]
            exhausted = not ranked or int(ranked[0]["fetched"]) < fetch
            if len(hits) >= k or exhausted or fetch >= MAX_FETCH:
                if context > 0:
                    fresh = [h.ref for h in hits if h.ref not in known]
                    near = [
                        {"source": r["ref"], "ref": r["neighbour"], "distance": r["distance"]}
                        for r in rows
                        if r["neighbour"] is not None
                    ]
                    self._remember_neighbours(context, fresh, near)
                return hits
            fetch *= 8

    def scores(self, refs: Sequence[UUID]) -> dict[UUID, tuple[float, float]]:
        """Absolute (cosine, BM25) of given memories, for ``fault``; refs outside the view are left out."""
        return self._exact_scores(list(refs), MEMORY)

    def knowledge_scores(self, k: int) -> dict[UUID, tuple[float, float]]:
        """The best L3 knowledge chunks in scope, with absolute (cosine, BM25)."""
        candidates: list[UUID] = []
        terms = query_terms(self.query)
        if terms:
            rows = self._fetch(
                SQL("{} LIMIT %(k)s").format(self._bm25(KNOWLEDGE, SQL("p.namespace = ANY(%(scope)s)"))),
                {"terms": terms, "k": k},
            )
            candidates += [r["ref"] for r in rows]
        if self.has_vectors and self._vector_model is not None:
            model, dims = self._vector_model
            rows = self._fetch(
                SQL(
                    "SELECT d.ref FROM {s}.search_docs d WHERE d.model = %(model)s AND d.kind = {kind}"
                    " AND d.namespace = ANY(%(scope)s)"
                    " ORDER BY d.embedding::halfvec({d}) <=> %(q)s::halfvec({d}) LIMIT %(k)s"
                ).format(s=self._s, kind=Literal(KNOWLEDGE), d=Literal(dims)),
                {"q": self._query_param(), "model": model, "k": k},
            )
            candidates += [r["ref"] for r in rows]
        return self._exact_scores(list(dict.fromkeys(candidates)), KNOWLEDGE)

    def token_estimates(self, refs: Sequence[UUID]) -> dict[UUID, int]:
        rows = self._fetch(
            SQL("SELECT id, content FROM {s}.memory_objects m WHERE id = ANY(%(refs)s) AND {scope}").format(
                s=self._s, scope=self._scope("m.namespace", "m.id")
            ),
            {"refs": list(refs)},
        )
        return {r["id"]: estimate_tokens(r["content"]) for r in rows}

    # -- memories by other handles than a query (assemble's lanes, fault's blocks) ------------

    def memory_rows(self, refs: Sequence[UUID], *, last: bool = False) -> dict[UUID, dict[str, Any]]:
        """The given memories the view lets through (``MEMORY_COLUMNS``); each is read once
        per view: what an earlier call read is kept (``rows_read``) and not read again.
        ``last``: the view's last statement; its transaction ends in the same round trip,
        and the view reads nothing after it."""
        wanted = [ref for ref in dict.fromkeys(refs) if ref not in self.rows_read]
        if wanted:
            rows = self._memories(SQL("m.id = ANY(%(refs)s)"), "m.id", {"refs": wanted}, last=last)
            self.rows_read.update((r["id"], r) for r in rows)
        return {ref: self.rows_read[ref] for ref in refs if ref in self.rows_read}

    def pinned(self, namespace: str) -> list[dict[str, Any]]:
        """The visible memories pinned for ``namespace``, in pinning order."""
        join = SQL(" JOIN {s}.pins p ON p.memory_id = m.id").format(s=self._s)
        return self._memories(SQL("p.namespace = %(ns)s"), "p.at, m.id", {"ns": namespace}, join)

    def recently_used(self, n: int) -> list[dict[str, Any]]:
        """The ``n`` visible memories most recently handed out in capsules."""
        join = SQL(" JOIN {s}.memory_access a ON a.memory_id = m.id").format(s=self._s)
        return self._memories(
            SQL("a.last_used IS NOT NULL"), "a.last_used DESC, m.id LIMIT %(n)s", {"n": n}, join
        )

    def _memories(
        self,
        where: Composed | SQL,
        order: str,
        params: dict[str, Any],
        join: Composed | None = None,
        *,
        last: bool = False,
    ) -> list[dict[str, Any]]:
        return (self._fetch_and_end if last else self._fetch)(
            SQL(
                "SELECT {columns} FROM {s}.memory_objects m{join}"
                " WHERE {where} AND {scope} AND {visible} ORDER BY {order}"
            ).format(
                columns=SQL(MEMORY_COLUMNS),
                s=self._s,
                join=join or SQL(""),
                where=where,
                scope=self._scope("m.namespace", "m.id"),
                visible=self._visible(),
                order=SQL(order),
            ),
            params,
        )

    # -- SQL pieces ---------------------------------------------------------------------------

    def _exact_scores(self, refs: list[UUID], kind: str) -> dict[UUID, tuple[float, float]]:
        if not refs:
            return {}
        memory = kind == MEMORY
        cosine: Composed | SQL = SQL("NULL::float8")
        params: dict[str, Any] = {"refs": refs, "terms": query_terms(self.query) or [""]}
        if self.has_vectors and self._vector_model is not None:
            model, dims = self._vector_model
            cosine = SQL(
                "CASE WHEN d.model = %(model)s THEN 1 - (d.embedding::halfvec({d}) <=> %(q)s::halfvec({d})) END"
            ).format(d=Literal(dims))
            params |= {"model": model, "q": self._query_param()}
        rows = self._fetch(
            SQL(_EXACT).format(
                s=self._s,
                cosine=cosine,
                kind=Literal(kind),
                k1=_float8(K1),
                b=_float8(B),
                join=SQL(" JOIN {s}.memory_objects m ON m.id = d.ref").format(s=self._s)
                if memory
                else SQL(""),
                scope=self._scope("d.namespace", "d.ref") if memory else SQL("d.namespace = ANY(%(scope)s)"),
                visible=self._visible() if memory else SQL("TRUE"),
            ),
            params,
        )
        return {r["ref"]: (float(r["cosine"] or 0.0), float(r["bm25"] or 0.0)) for r in rows}

    def _bm25(self, kind: str, scope: Composed | SQL) -> Composed:
        """Documents of ``kind`` in ``scope`` ranked by BM25 over the query's terms, best first."""
        return SQL(_BM25).format(s=self._s, kind=Literal(kind), k1=_float8(K1), b=_float8(B), scope=scope)

    def _scope(self, namespace: str, ref: str) -> Composed:
        """The scope as an index condition; shares (rare) widen it only when there are any."""
        if not self._params["shared"]:
            return SQL("{ns} = ANY(%(scope)s)").format(ns=SQL(namespace))
        return SQL("({ns} = ANY(%(scope)s) OR {ref} = ANY(%(shared)s))").format(
            ns=SQL(namespace), ref=SQL(ref)
        )

    def _visible(self) -> Composed | SQL:
        """Which memories count: current (default), also retired, or as known at a position."""
        w = self._where
        parts: list[Composed | SQL] = [SQL("m.status <> 'disputed' AND m.content IS NOT NULL")]
        if w.position is not None:
            parts.append(
                SQL(
                    "EXISTS (SELECT 1 FROM {s}.memory_timeline t WHERE t.memory_id = m.id"
                    f" AND {current('t', '%(v)s', started=True)} AND {known_at('t', '%(p)s')})"
                ).format(s=self._s)
            )
        elif not w.include_retired:
            parts.append(SQL(current("m", "%(v)s", started=w.valid_at is not None)))
        if w.tags:
            parts.append(SQL("m.tags @> %(tags)s::text[]"))
        if w.selectors:
            parts.append(SQL("m.selectors @> %(selectors)s::text[]"))
        return SQL(" AND ").join(parts)

    def _fetch(self, query: Composed, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self._ended:
            raise RuntimeError("this view's transaction has ended (after its last statement)")
        rows: list[dict[str, Any]] = self._conn.execute(query, self._params | params, prepare=True).fetchall()
        return rows

    def _fetch_and_end(self, query: Composed, params: dict[str, Any]) -> list[dict[str, Any]]:
        """``_fetch``, and the view's transaction committed in the same round trip (a
        pipeline): read only, so nothing is lost by ending it; nothing is read after it."""
        if self._ended:
            raise RuntimeError("this view's transaction has ended (after its last statement)")
        self._ended = True
        with self._conn.pipeline():  # sends both, then one sync: one round trip
            cursor = self._conn.execute(query, self._params | params, prepare=True)
            self._conn.execute("COMMIT")
        rows: list[dict[str, Any]] = cursor.fetchall()
        return rows


def _float8(value: float) -> Composed:
    """A float8 constant: a bare ``1.2`` is numeric, and would make BM25's arithmetic numeric."""
    return SQL("{}::float8").format(Literal(value))


def _halfvec_rows(rows: Sequence[dict[str, Any]], dims: int) -> np.ndarray[Any, Any]:
    """The ``embedding`` of each row, as pgvector sends a ``halfvec`` in binary (two 16-bit
    words, dimensions and unused, then big-endian float16 values), one float32 row each."""
    data = b"".join(bytes(r["embedding"])[4:] for r in rows)
    return np.frombuffer(data, dtype=">f2").reshape(len(rows), dims).astype(np.float32)


def _cosines(queries: np.ndarray[Any, Any], docs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Cosine similarity of every query (rows, rounded to float16 as the SQL lane sends
    them) with every document."""
    q = queries.astype(np.float16).astype(np.float32)
    q /= np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
    d = docs / np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
    scores: np.ndarray[Any, Any] = q @ d.T
    return scores


# BM25 with statistics summed over the caller's scope (never the whole tenant), so a
# score depends only on documents the caller may see. The statistics are float8: summed
# integers are numeric, and numeric arithmetic on every posting of a common term in a large
# scope cost more than the rest of the lane.
_STATS = """
WITH q AS MATERIALIZED (
    SELECT term, sum(df)::float8 AS df FROM {s}.search_terms
     WHERE namespace = ANY(%(scope)s) AND kind = {kind} AND term = ANY(%(terms)s) GROUP BY term
), st AS MATERIALIZED (
    SELECT coalesce(sum(docs), 0)::float8 AS docs, coalesce(sum(total_length), 0)::float8 AS total
      FROM {s}.search_stats WHERE namespace = ANY(%(scope)s) AND kind = {kind}
), w AS MATERIALIZED (
    SELECT q.term, ln(1 + (greatest(st.docs, q.df) - q.df + 0.5) / (q.df + 0.5)) AS idf,
           greatest(st.total / greatest(st.docs, 1), 1) AS avgdl
      FROM q, st
)"""
_BM25_SUM = "sum(w.idf * p.tf * ({k1} + 1) / (p.tf + {k1} * (1 - {b} + {b} * p.length / w.avgdl)))"
# Each term's postings are read by a lateral probe of its own: a generic plan (OPEN_VIEW)
# cannot see how many postings a join on the terms yields, guessed about a hundred, and sorted
# every posting by document to group them. Per term it estimates them from the postings'
# statistics (postings per distinct term) and, where terms are common, hashes instead.
_BM25 = (
    _STATS
    + """
SELECT p.ref, """
    + _BM25_SUM
    + """ AS score
  FROM w CROSS JOIN LATERAL (
       SELECT p.ref, p.tf, p.length FROM {s}.search_postings p
        WHERE p.kind = {kind} AND p.term = w.term AND {scope}) p
 GROUP BY p.ref ORDER BY score DESC, p.ref"""
)
_EXACT = (
    _STATS
    + """
SELECT d.ref, {cosine} AS cosine,
       (SELECT """
    + _BM25_SUM
    + """ FROM {s}.search_postings p JOIN w ON w.term = p.term WHERE p.ref = d.ref) AS bm25
  FROM {s}.search_docs d{join}
 WHERE d.ref = ANY(%(refs)s) AND d.kind = {kind} AND {scope} AND {visible}"""
)
_TOP = "SELECT ref, score, fetched, visible, NULL::uuid AS neighbour, NULL::bigint AS distance FROM top"
# The nearest memories before and after a source (``src``) in its namespace's write order
# (the index on (namespace, kind, position) walks straight to them), as ``n``, with ``m``
# their memory rows for the caller's scope and visibility.
_WRITE_ORDER_NEIGHBOURS = """ CROSS JOIN LATERAL (
       (SELECT x.ref, row_number() OVER (ORDER BY x.position DESC) AS distance
          FROM {s}.search_docs x
         WHERE x.namespace = src.namespace AND x.kind = {kind} AND x.position < src.position
         ORDER BY x.position DESC LIMIT {span})
       UNION ALL
       (SELECT x.ref, row_number() OVER (ORDER BY x.position) AS distance
          FROM {s}.search_docs x
         WHERE x.namespace = src.namespace AND x.kind = {kind} AND x.position > src.position
         ORDER BY x.position LIMIT {span})
 ) n
  JOIN {s}.memory_objects m ON m.id = n.ref
"""
# A lane's visible hits and, in the same statement, the neighbours (as ``_NEIGHBOURS``) of
# those whose neighbours the view does not know yet (``known``).
_TOP_WITH_NEIGHBOURS = (
    _TOP
    + """
UNION ALL
SELECT src.ref, NULL, NULL, NULL, n.ref, n.distance
  FROM top JOIN {s}.search_docs src ON src.ref = top.ref AND src.kind = {kind}
"""
    + _WRITE_ORDER_NEIGHBOURS
    + """ WHERE top.visible AND NOT (top.ref = ANY(%(known)s::uuid[])) AND {scope} AND {visible}"""
)
# The write-order neighbours of the sources ``refs``, then only the visible ones.
_NEIGHBOURS = (
    """
SELECT src.ref AS source, n.ref, n.distance
  FROM {s}.search_docs src
"""
    + _WRITE_ORDER_NEIGHBOURS
    + """ WHERE src.ref = ANY(%(refs)s) AND src.kind = {kind} AND {scope} AND {visible}"""
)
