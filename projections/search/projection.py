"""The search index: a projection of the ledger into a vector lane and a lexical lane.

- ``search_docs``: one row per searchable thing (a memory, or a chunk of an L3 knowledge
  document): namespace, the embedding sealed in its event (never re-embedded), length.
  Vectors are ``halfvec`` of any dimension; each embedding model gets its own partial
  HNSW index (cosine) on ``embedding::halfvec(d) WHERE model = m``.
- ``search_postings`` (term, ref, tf), ``search_terms`` (df) and ``search_stats`` (docs,
  total length), kept per namespace and kind, so BM25 statistics can be summed over the
  caller's scope alone.
- ``knowledge_documents`` / ``knowledge_chunks``: the current version of each L3 document
  (none of an erased one: ``KnowledgeErased`` drops its rows, chunks and postings).
- ``search_serving``: the model the vector lane serves (one row): the latest adopted
  (``EmbeddingModelAdopted``), else the model of the first memory vector. A memory's
  vectors of other models (``MemoryReembedded`` for a model not adopted yet, or the vector
  an adoption replaced) wait in ``search_vectors`` (ref, model); the adoption moves its
  model's into ``search_docs`` in the same transaction, and builds that model's HNSW index.
  So for every memory and every model the ledger holds a vector of it by, the vector is
  either in ``search_docs`` or in ``search_vectors``: what the re-embedding pass reads to
  find what is missing (projections/search/vectors.py).

Current-ness (active, not retired, valid now) is not copied here: queries join
``memory_objects``, the one place that knows it. Erasure deletes every derived row.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from typing import Any
from uuid import UUID

import numpy as np
import psycopg
from psycopg import Cursor
from psycopg.sql import SQL, Composed, Identifier, Literal

from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.events import (
    EmbeddingModelAdopted,
    KnowledgeErased,
    KnowledgePublished,
    MemoryErased,
    MemoryReembedded,
    MemoryWritten,
)
from memwarden.projections.sanitize import sanitized
from memwarden.projections.search.halfvec import HalfvecParam, bind_halfvec_arrays
from memwarden.projections.search.lexical import term_frequencies

MEMORY = "memory"
KNOWLEDGE = "knowledge"
DEFER_MIN_BACKLOG = 20_000
"""Events behind the ledger below which the HNSW index is always kept up row by row."""
HNSW_BUILD_MEMORY_CAP_KB = 1024 * 1024
"""At most this much maintenance_work_mem for a build (a graph row takes ~1.5 kB at 384 dims)."""
log = logging.getLogger(__name__)


def hnsw_index_name(model: str) -> str:
    return "search_docs_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:12]


class _Doc:
    __slots__ = ("dims", "embedding", "kind", "length", "model", "namespace", "position", "ref", "tf")

    def __init__(
        self,
        ref: UUID,
        kind: str,
        namespace: str,
        text: str,
        model: str | None,
        embedding: bytes | None,
        position: int,
    ) -> None:
        self.ref, self.kind, self.namespace, self.position = ref, kind, namespace, position
        self.tf, self.length = term_frequencies(text)
        self.model = model if embedding is not None else None
        self.embedding = (
            HalfvecParam(np.frombuffer(embedding, dtype="<f2")) if embedding is not None else None
        )
        self.dims = len(embedding) // 2 if embedding is not None else 0


class _Vector:
    """A memory's vector of another model (``MemoryReembedded``)."""

    __slots__ = ("embedding", "model", "ref")

    def __init__(self, ref: UUID, model: str, embedding: bytes) -> None:
        self.ref, self.model = ref, model
        self.embedding = HalfvecParam(np.frombuffer(embedding, dtype="<f2"))


class _Pending:
    """Documents, or one model's vectors, gathered into multi-row statements; sent before
    anything else is applied, so every statement keeps its ledger order."""

    def __init__(self, projection: SearchIndexProjection, curs: Cursor[Any], schema: str) -> None:
        self.projection, self.curs, self.schema = projection, curs, schema
        self.docs: list[_Doc] = []
        self.vectors: list[_Vector] = []

    def doc(self, doc: _Doc) -> None:
        if self.vectors:
            self.flush()
        self.docs.append(doc)

    def vector(self, vector: _Vector) -> None:
        if self.docs or (self.vectors and self.vectors[0].model != vector.model):
            self.flush()
        self.vectors.append(vector)

    def flush(self) -> None:
        s = Identifier(self.schema)
        if self.docs:
            first = _insert(self.curs, s, self.docs)
            if first is not None:
                self.projection.first_vector(self.curs, self.schema, first)
        if self.vectors:
            _store_vectors(self.curs, self.schema, self.vectors)
        self.docs, self.vectors = [], []


class SearchIndexProjection:
    name = "search_index"
    tables = (
        "search_docs",
        "search_postings",
        "search_terms",
        "search_stats",
        "knowledge_documents",
        "knowledge_chunks",
        "search_vectors",
        "search_serving",
    )

    def __init__(self, vector_model: tuple[str, int] | None = None) -> None:
        """``vector_model``: the configured embedder's (model id, dimensions): whose HNSW index
        to keep while the index holds no vector yet (then: the model it serves)."""
        self.vector_model = vector_model

    def create(self, curs: Cursor[Any], schema: str) -> None:
        for statement in _schema_sql(schema):
            curs.execute(statement)
        self.build_indexes(curs, schema)

    # -- the HNSW index: kept up row by row, or built once after a long catch-up ---------------
    #
    # Inserting into the graph costs several times more a row than building it over the same
    # rows once, when the graph fits maintenance_work_mem (docs/design-figures.md, Search).

    def serving_model(self, curs: Cursor[Any], schema: str) -> tuple[str, int] | None:
        """The model whose HNSW index to keep: the one served, else the configured one."""
        return serving_of(curs, schema) or self.vector_model

    def defer_indexes(self, curs: Cursor[Any], schema: str, backlog: int) -> bool:
        """Drop the HNSW index when ``backlog`` events are at least as many as the rows it
        holds (a build over old and new rows then costs less than inserting the new ones)."""
        model = self.serving_model(curs, schema)
        if model is None or backlog < DEFER_MIN_BACKLOG:
            return False
        if _index_missing(curs, schema, model[0]):
            return True
        if backlog < self._estimated_rows(curs, schema):
            return False
        _drop_index(curs, schema, model[0])
        return True

    def indexes_deferred(self, curs: Cursor[Any], schema: str) -> bool:
        model = self.serving_model(curs, schema)
        return model is not None and _index_missing(curs, schema, model[0])

    def build_indexes(self, curs: Cursor[Any], schema: str) -> None:
        """Build the HNSW index if it is missing, with memory for the whole graph (a graph
        that outgrows maintenance_work_mem is finished on disk, several times slower)."""
        served = self.serving_model(curs, schema)
        if served is None or not _index_missing(curs, schema, served[0]):
            return
        model, dims = served
        needed_kb = min(HNSW_BUILD_MEMORY_CAP_KB, 32 * 1024 + 2 * _vector_rows(curs, schema, model))
        curs.execute(
            "SELECT set_config('maintenance_work_mem', %s, true)"
            " FROM pg_settings WHERE name = 'maintenance_work_mem' AND setting::bigint < %s",
            (f"{needed_kb}kB", needed_kb),
        )
        create = SQL(
            "CREATE INDEX IF NOT EXISTS {i} ON {s}.search_docs USING hnsw"
            " ((embedding::halfvec({d})) halfvec_cosine_ops) WHERE model = {m}"
        ).format(
            i=Identifier(hnsw_index_name(model)), s=Identifier(schema), d=Literal(dims), m=Literal(model)
        )
        try:
            with curs.connection.transaction():
                curs.execute(create)
        except psycopg.Error:  # e.g. no shared memory for a parallel build: build alone
            log.warning("parallel HNSW build failed; building without workers", exc_info=True)
            curs.execute("SELECT set_config('max_parallel_maintenance_workers', '0', true)")
            curs.execute(create)

    def _switch_index(self, curs: Cursor[Any], schema: str, old: tuple[str, int] | None) -> None:
        """The served model changed from ``old``: its index goes, the new one's is built,
        unless a catch-up deferred the index (then it builds the served one at its end)."""
        new = self.serving_model(curs, schema)
        if new is None or (old is not None and old[0] == new[0]):
            return
        if old is not None:
            if _index_missing(curs, schema, old[0]):
                return
            _drop_index(curs, schema, old[0])
        self.build_indexes(curs, schema)

    def first_vector(self, curs: Cursor[Any], schema: str, doc: _Doc) -> None:
        """The first memory vector names the served model, until one is adopted (the index
        kept until then is the configured model's)."""
        row = curs.execute(
            SQL(
                "INSERT INTO {s}.search_serving (model, dimensions, named_by) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING model"
            ).format(s=Identifier(schema)),
            (doc.model, doc.dims, doc.ref),
        ).fetchone()
        if row is not None:
            self._switch_index(curs, schema, self.vector_model)

    def _renamed(self, curs: Cursor[Any], schema: str, erased: UUID) -> None:
        """An erased memory that named the served model (no model adopted yet) hands the name
        to the earliest memory vector left, or to none: what a replay from zero, which never
        sees an erased memory's vector, finds first."""
        s = Identifier(schema)
        row = curs.execute(
            SQL(
                "DELETE FROM {s}.search_serving WHERE named_by = %s AND adopted_position IS NULL RETURNING model"
            ).format(s=s),
            (erased,),
        ).fetchone()
        if row is None:
            return
        curs.execute(
            SQL(
                "INSERT INTO {s}.search_serving (model, dimensions, named_by)"
                " SELECT model, vector_dims(embedding), ref FROM {s}.search_docs"
                " WHERE kind = 'memory' AND model IS NOT NULL AND embedding IS NOT NULL"
                " ORDER BY position LIMIT 1"
            ).format(s=s)
        )
        self._switch_index(curs, schema, (row["model"], 0))

    def _estimated_rows(self, curs: Cursor[Any], schema: str) -> int:
        """The rows of ``search_docs`` as the statistics collector counts them (no scan)."""
        row = curs.execute(
            "SELECT pg_stat_get_live_tuples(to_regclass(format('%%I.search_docs', %s::text))) AS n", (schema,)
        ).fetchone()
        return int(row["n"] or 0) if row else 0

    def apply(self, curs: Cursor[Any], schema: str, events: list[Recorded]) -> None:
        events = sanitized(events, _READ)
        pending = _Pending(self, curs, schema)
        for r in events:
            e = r.event
            if isinstance(e, MemoryWritten):
                if e.content is not None:
                    pending.doc(
                        _Doc(
                            e.memory_id,
                            MEMORY,
                            e.namespace,
                            e.content,
                            e.embedding_model,
                            e.embedding,
                            int(r.position or 0),
                        )
                    )
            elif isinstance(e, MemoryReembedded):
                if e.embedding:  # none in a tombstone: nothing of an erased memory is kept
                    pending.vector(_Vector(e.memory_id, e.embedding_model, e.embedding))
            elif isinstance(e, _ONE_BY_ONE):
                pending.flush()
                self._apply_one(curs, schema, r)
        pending.flush()

    def _apply_one(self, curs: Cursor[Any], schema: str, r: Recorded) -> None:
        s, e = Identifier(schema), r.event
        if isinstance(e, MemoryErased):
            _delete(curs, s, [e.memory_id])
            self._renamed(curs, schema, e.memory_id)
        elif isinstance(e, KnowledgeErased):
            _drop_document(curs, s, e.document_id)
        elif isinstance(e, KnowledgePublished):
            _publish(curs, s, e, int(r.position or 0))
        elif isinstance(e, EmbeddingModelAdopted):
            old = self.serving_model(curs, schema)
            _adopt(curs, s, e, int(r.position or 0))
            self._switch_index(curs, schema, old)


_READ = (
    MemoryWritten,
    MemoryReembedded,
    MemoryErased,
    KnowledgePublished,
    KnowledgeErased,
    EmbeddingModelAdopted,
)
_ONE_BY_ONE = (MemoryErased, KnowledgePublished, KnowledgeErased, EmbeddingModelAdopted)


def serving_of(curs: Cursor[Any], schema: str) -> tuple[str, int] | None:
    """The (model, dimensions) the vector lane serves; None before the first vector."""
    row = curs.execute(
        SQL("SELECT model, dimensions FROM {s}.search_serving").format(s=Identifier(schema))
    ).fetchone()
    return (row["model"], int(row["dimensions"])) if row else None


def _index_missing(curs: Cursor[Any], schema: str, model: str) -> bool:
    row = curs.execute(
        "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NULL AS missing",
        (schema, hnsw_index_name(model)),
    ).fetchone()
    return bool(row and row["missing"])


def _drop_index(curs: Cursor[Any], schema: str, model: str) -> None:
    curs.execute(
        SQL("DROP INDEX IF EXISTS {s}.{i}").format(s=Identifier(schema), i=Identifier(hnsw_index_name(model)))
    )


def _vector_rows(curs: Cursor[Any], schema: str, model: str) -> int:
    row = curs.execute(
        SQL("SELECT count(*) AS n FROM {s}.search_docs WHERE model = %s").format(s=Identifier(schema)),
        (model,),
    ).fetchone()
    return int(row["n"]) if row else 0


# -- vectors of other models, and the switch --------------------------------------------------

_STASH = (
    "INSERT INTO {s}.search_vectors (ref, model, embedding)"
    " SELECT d.ref, d.model, d.embedding FROM {s}.search_docs d WHERE {which}"
    " AND d.model IS NOT NULL AND d.model <> %(m)s AND d.embedding IS NOT NULL"
    " ON CONFLICT (ref, model) DO UPDATE SET embedding = excluded.embedding"
)
"""Keep aside the vectors that ``search_docs`` is about to replace by ``%(m)s``'s."""


def _store_vectors(curs: Cursor[Any], schema: str, vectors: list[_Vector]) -> None:
    """One model's vectors: in service at once when the index serves that model (the vector
    each replaces waits aside), else aside until it is adopted. Only memories still
    indexed keep one (an erased one has no row)."""
    s = Identifier(schema)
    vectors = list({v.ref: v for v in vectors}.values())
    model = vectors[0].model
    bind_halfvec_arrays(curs)
    params = {"m": model, "refs": [v.ref for v in vectors], "e": [v.embedding for v in vectors]}
    served = serving_of(curs, schema)
    if served is not None and served[0] == model:
        curs.execute(SQL(_STASH).format(s=s, which=SQL("d.ref = ANY(%(refs)s)")), params)
        curs.execute(
            SQL(
                "UPDATE {s}.search_docs d SET model = %(m)s, embedding = u.e"
                " FROM unnest(%(refs)b::uuid[], %(e)b::halfvec[]) AS u(ref, e) WHERE d.ref = u.ref"
            ).format(s=s),
            params,
        )
        return
    curs.execute(
        SQL(
            "INSERT INTO {s}.search_vectors (ref, model, embedding)"
            " SELECT u.ref, %(m)s, u.e FROM unnest(%(refs)b::uuid[], %(e)b::halfvec[]) AS u(ref, e)"
            " JOIN {s}.search_docs d ON d.ref = u.ref WHERE d.model IS DISTINCT FROM %(m)s"
            " ON CONFLICT (ref, model) DO UPDATE SET embedding = excluded.embedding"
        ).format(s=s),
        params,
    )


def _adopt(curs: Cursor[Any], s: Identifier, e: EmbeddingModelAdopted, position: int) -> None:
    """The index serves ``e.model`` from here on: its vectors move into ``search_docs`` (the
    ones they replace aside), in this one transaction."""
    params = {"m": e.model}
    which = SQL("EXISTS (SELECT 1 FROM {s}.search_vectors v WHERE v.ref = d.ref AND v.model = %(m)s)").format(
        s=s
    )
    curs.execute(SQL(_STASH).format(s=s, which=which), params)
    curs.execute(
        SQL(
            "UPDATE {s}.search_docs d SET model = v.model, embedding = v.embedding"
            " FROM {s}.search_vectors v WHERE v.ref = d.ref AND v.model = %(m)s"
        ).format(s=s),
        params,
    )
    curs.execute(SQL("DELETE FROM {s}.search_vectors WHERE model = %(m)s").format(s=s), params)
    curs.execute(
        SQL(
            "INSERT INTO {s}.search_serving (model, dimensions, adopted_position) VALUES (%s, %s, %s)"
            " ON CONFLICT (only_row) DO UPDATE SET model = excluded.model,"
            " dimensions = excluded.dimensions, adopted_position = excluded.adopted_position, named_by = NULL"
        ).format(s=s),
        (e.model, e.dimensions, position),
    )


def _schema_sql(schema: str) -> list[Composed]:
    """The tables as they are now, for a rebuild's shadow schema; the live ones (and the
    pgvector extension) are made by migrations 0002_read_models and 0007_reembedding."""
    s = Identifier(schema)
    return [
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_docs (
    ref uuid PRIMARY KEY,
    kind text NOT NULL,
    namespace text NOT NULL,
    model text,
    embedding halfvec,
    length int NOT NULL,
    position bigint NOT NULL
)""").format(s=s),
        # covering: a scope's vectors are read from index pages that sit together (an
        # index-only scan), not from heap pages scattered over the whole table
        SQL(
            "CREATE INDEX IF NOT EXISTS search_docs_scope ON {s}.search_docs (namespace, kind, model)"
            " INCLUDE (ref, embedding)"
        ).format(s=s),
        # a namespace's write order: the hybrid driver's neighbours of a hit (view.neighbours)
        SQL(
            "CREATE INDEX IF NOT EXISTS search_docs_order ON {s}.search_docs (namespace, kind, position)"
            " INCLUDE (ref)"
        ).format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_postings (
    term text NOT NULL,
    ref uuid NOT NULL,
    namespace text NOT NULL,
    kind text NOT NULL,
    tf int NOT NULL,
    length int NOT NULL,
    PRIMARY KEY (ref, term)
)""").format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS search_postings_term ON {s}.search_postings"
            " (kind, term, namespace) INCLUDE (ref, tf, length)"
        ).format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_terms (
    namespace text NOT NULL,
    kind text NOT NULL,
    term text NOT NULL,
    df int NOT NULL,
    PRIMARY KEY (namespace, kind, term)
)""").format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_stats (
    namespace text NOT NULL,
    kind text NOT NULL,
    docs bigint NOT NULL,
    total_length bigint NOT NULL,
    PRIMARY KEY (namespace, kind)
)""").format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.knowledge_documents (
    document_id uuid PRIMARY KEY,
    namespace text NOT NULL,
    slug text NOT NULL,
    version int NOT NULL,
    title text NOT NULL,
    tags text[] NOT NULL,
    content_hash text NOT NULL,
    source text NOT NULL,
    published_by text NOT NULL,
    published_at timestamptz NOT NULL,
    position bigint NOT NULL
)""").format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.knowledge_chunks (
    ref uuid PRIMARY KEY,
    document_id uuid NOT NULL,
    version int NOT NULL,
    ordinal int NOT NULL,
    heading text NOT NULL,
    text text NOT NULL
)""").format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS knowledge_chunks_document ON {s}.knowledge_chunks (document_id)"
        ).format(s=s),
        # migration 0007_reembedding
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_vectors (
    ref uuid NOT NULL,
    model text NOT NULL,
    embedding halfvec NOT NULL,
    PRIMARY KEY (ref, model)
)""").format(s=s),
        SQL("""
CREATE TABLE IF NOT EXISTS {s}.search_serving (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    model text NOT NULL,
    dimensions int NOT NULL,
    adopted_position bigint,
    named_by uuid
)""").format(s=s),
        SQL(
            "CREATE INDEX IF NOT EXISTS search_docs_first_vector ON {s}.search_docs (position)"
            " WHERE kind = 'memory' AND model IS NOT NULL AND embedding IS NOT NULL"
        ).format(s=s),
    ]


def _insert(curs: Cursor[Any], s: Identifier, docs: list[_Doc]) -> _Doc | None:
    """Index a batch of documents: a few multi-row statements, whatever the batch size.
    Arrays go in binary (no text to format and parse), vectors too. The first memory of
    the batch that has a vector, if any (it may name the served model)."""
    docs = list({d.ref: d for d in docs}.values())
    if not docs:
        return None
    first = next((d for d in docs if d.kind == MEMORY and d.model is not None), None)
    if any(d.embedding is not None for d in docs):
        bind_halfvec_arrays(curs)
    curs.execute(
        SQL(
            "INSERT INTO {s}.search_docs (ref, kind, namespace, model, embedding, length, position)"
            " SELECT * FROM unnest(%b::uuid[], %b::text[], %b::text[], %b::text[], %b::halfvec[], %b::int[],"
            " %b::bigint[]) ON CONFLICT (ref) DO NOTHING RETURNING ref"
        ).format(s=s),
        (
            [d.ref for d in docs],
            [d.kind for d in docs],
            [d.namespace for d in docs],
            [d.model for d in docs],
            [d.embedding for d in docs],
            [d.length for d in docs],
            [d.position for d in docs],
        ),
    )
    fresh = {row["ref"] for row in curs.fetchall()}
    docs = [d for d in docs if d.ref in fresh]  # a replayed batch must not count twice
    postings = [(term, d, tf) for d in docs for term, tf in d.tf.items()]
    if postings:
        curs.execute(
            SQL(
                "INSERT INTO {s}.search_postings (term, ref, namespace, kind, tf, length)"
                " SELECT * FROM unnest(%b::text[], %b::uuid[], %b::text[], %b::text[], %b::int[], %b::int[])"
            ).format(s=s),
            (
                [t for t, _, _ in postings],
                [d.ref for _, d, _ in postings],
                [d.namespace for _, d, _ in postings],
                [d.kind for _, d, _ in postings],
                [tf for _, _, tf in postings],
                [d.length for _, d, _ in postings],
            ),
        )
    df = Counter((d.namespace, d.kind, term) for d in docs for term in d.tf)
    _add_terms(curs, s, df, sign=1)
    stats: dict[tuple[str, str], list[int]] = {}
    for d in docs:
        entry = stats.setdefault((d.namespace, d.kind), [0, 0])
        entry[0] += 1
        entry[1] += d.length
    _add_stats(curs, s, {key: (n, total) for key, (n, total) in stats.items()})
    return first


def _add_terms(curs: Cursor[Any], s: Identifier, df: Counter[tuple[str, str, str]], sign: int) -> None:
    if not df:
        return
    keys = sorted(df)
    curs.execute(
        SQL(
            "INSERT INTO {s}.search_terms AS t (namespace, kind, term, df)"
            " SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::int[])"
            " ON CONFLICT (namespace, kind, term) DO UPDATE SET df = t.df + excluded.df"
        ).format(s=s),
        ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys], [sign * df[k] for k in keys]),
    )
    if sign < 0:  # a term no document uses any more leaves no trace
        curs.execute(SQL("DELETE FROM {s}.search_terms WHERE df <= 0").format(s=s))


def _add_stats(curs: Cursor[Any], s: Identifier, stats: dict[tuple[str, str], tuple[int, int]]) -> None:
    keys = sorted(stats)
    if not keys:
        return
    curs.execute(
        SQL(
            "INSERT INTO {s}.search_stats AS t (namespace, kind, docs, total_length)"
            " SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[])"
            " ON CONFLICT (namespace, kind) DO UPDATE"
            " SET docs = t.docs + excluded.docs, total_length = t.total_length + excluded.total_length"
        ).format(s=s),
        (
            [k[0] for k in keys],
            [k[1] for k in keys],
            [stats[k][0] for k in keys],
            [stats[k][1] for k in keys],
        ),
    )
    if any(n < 0 for n, _ in stats.values()):  # as if the erased documents had never been indexed
        curs.execute(SQL("DELETE FROM {s}.search_stats WHERE docs <= 0").format(s=s))


def _delete(curs: Cursor[Any], s: Identifier, refs: list[UUID]) -> None:
    """Drop documents and every row derived from them, statistics included."""
    curs.execute(
        SQL("DELETE FROM {s}.search_docs WHERE ref = ANY(%s) RETURNING namespace, kind, length").format(s=s),
        (refs,),
    )
    gone = curs.fetchall()
    if not gone:
        return
    curs.execute(SQL("DELETE FROM {s}.search_vectors WHERE ref = ANY(%s)").format(s=s), (refs,))
    curs.execute(
        SQL("DELETE FROM {s}.search_postings WHERE ref = ANY(%s) RETURNING namespace, kind, term").format(
            s=s
        ),
        (refs,),
    )
    _add_terms(curs, s, Counter((r["namespace"], r["kind"], r["term"]) for r in curs.fetchall()), sign=-1)
    stats: dict[tuple[str, str], tuple[int, int]] = {}
    for row in gone:
        n, total = stats.get((row["namespace"], row["kind"]), (0, 0))
        stats[(row["namespace"], row["kind"])] = (n - 1, total - row["length"])
    _add_stats(curs, s, stats)


def _drop_chunks(curs: Cursor[Any], s: Identifier, document_id: UUID) -> None:
    """A document's chunks and every search row derived from them (postings, statistics)."""
    curs.execute(
        SQL("DELETE FROM {s}.knowledge_chunks WHERE document_id = %s RETURNING ref").format(s=s),
        (document_id,),
    )
    _delete(curs, s, [r["ref"] for r in curs.fetchall()])


def _drop_document(curs: Cursor[Any], s: Identifier, document_id: UUID) -> None:
    """Nothing of the document stays indexed: its key is destroyed (erased, or shredded)."""
    _drop_chunks(curs, s, document_id)
    curs.execute(
        SQL("DELETE FROM {s}.knowledge_documents WHERE document_id = %s").format(s=s), (document_id,)
    )


def _publish(curs: Cursor[Any], s: Identifier, e: KnowledgePublished, position: int) -> None:
    """A new version replaces the previous one's chunks; the versions stay on the ledger.
    A shredded version (the document's data key destroyed) leaves nothing of it indexed."""
    curs.execute(
        SQL("SELECT version FROM {s}.knowledge_documents WHERE document_id = %s").format(s=s),
        (e.document_id,),
    )
    row = curs.fetchone()
    if row is not None and row["version"] >= e.version:
        return
    if e.shredded:
        _drop_document(curs, s, e.document_id)
        return
    _drop_chunks(curs, s, e.document_id)
    curs.execute(
        SQL(
            "INSERT INTO {s}.knowledge_documents (document_id, namespace, slug, version, title, tags, content_hash,"
            " source, published_by, published_at, position) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (document_id) DO UPDATE SET version = excluded.version, title = excluded.title,"
            " tags = excluded.tags, content_hash = excluded.content_hash, source = excluded.source,"
            " published_by = excluded.published_by, published_at = excluded.published_at, position = excluded.position"
        ).format(s=s),
        (
            e.document_id,
            e.namespace,
            e.slug,
            e.version,
            e.title,
            list(e.tags),
            e.content_hash,
            e.source,
            e.published_by,
            e.at,
            position,
        ),
    )
    curs.executemany(
        SQL(
            "INSERT INTO {s}.knowledge_chunks (ref, document_id, version, ordinal, heading, text)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
        ).format(s=s),
        [(c.chunk_id, e.document_id, e.version, n, c.heading, c.text) for n, c in enumerate(e.chunks)],
    )
    _insert(
        curs,
        s,
        [
            _Doc(
                c.chunk_id,
                KNOWLEDGE,
                e.namespace,
                f"{e.title}\n{c.heading}\n{c.text}",
                e.embedding_model,
                c.embedding,
                position,
            )
            for c in e.chunks
        ],
    )
