"""What every embedder offers, the errors callers handle, and the compact vector form.

An embedder turns texts into unit-length float32 rows. Callers that cannot get vectors
(:class:`EmbedderUnavailable`) degrade to lexical-only search; a model file that fails its
pin (:class:`ModelFileRejected`) stops start-up instead, with no silent fallback.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

Matrix = npt.NDArray[np.float32]
"""A float32 array: (rows, dimensions) from ``embed``, (dimensions,) for one vector."""


class EmbedderUnavailable(Exception):
    """The embedder is down, timed out, or answered with something that is not vectors."""


class ModelFileRejected(Exception):
    """A pinned model or tokenizer file is missing, unreadable, or not the pinned bytes."""

    def __init__(self, path: str, message: str, *, expected: str | None = None, actual: str | None = None):
        self.path = path
        self.expected = expected
        self.actual = actual
        super().__init__(message)


@runtime_checkable
class Embedder(Protocol):
    @property
    def model_id(self) -> str:
        """Names the model; stored beside every vector, so vectors of two models never mix."""
        ...

    @property
    def dimensions(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """float32, shape ``(len(texts), dimensions)``, each row of unit length.

        Raises :class:`EmbedderUnavailable` when it cannot.
        """
        ...


def check_texts(texts: Sequence[str]) -> None:
    """What every embedder takes: a sequence of str (one bare str is refused, not split)."""
    if isinstance(texts, str):
        raise TypeError("embed takes a sequence of texts, not one str")
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be str, got {type(text).__name__}")


def embed_rows(embedder: Embedder, texts: Sequence[str]) -> Matrix:
    """The rows of ``texts``, checked to be one per text."""
    rows = embedder.embed(texts)
    if rows.ndim != 2 or rows.shape[0] != len(texts):
        raise EmbedderUnavailable(
            f"{embedder.model_id}: expected {len(texts)} rows, got an array of shape {rows.shape}"
        )
    return rows


def embed_one(embedder: Embedder, text: str) -> Matrix:
    """The 1-D vector of one text."""
    row: Matrix = embed_rows(embedder, [text])[0]
    return row


def normalize_rows(matrix: npt.ArrayLike) -> Matrix:
    """float32 copy with each row scaled to unit length; an all-zero row stays zero (never NaN)."""
    rows = np.array(matrix, dtype=np.float32, ndmin=2)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    np.divide(rows, norms, out=rows, where=norms > 0)
    return rows


def vector_to_bytes(vector: npt.ArrayLike) -> bytes:
    """The compact form sealed in the ledger: float16, little-endian, 2 bytes per dimension."""
    values = np.asarray(vector, dtype=np.float32)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"a vector is 1-D and non-empty, got shape {values.shape}")
    with np.errstate(over="ignore"):
        half = values.astype("<f2")
    if not np.all(np.isfinite(half)):
        raise ValueError("the vector has values that are not finite in float16")
    return half.tobytes()


def vector_from_bytes(data: bytes) -> Matrix:
    """The float32 1-D vector of :func:`vector_to_bytes`'s bytes."""
    if not data or len(data) % 2:
        raise ValueError(f"float16 vector bytes come in non-empty pairs, got {len(data)} bytes")
    return np.frombuffer(data, dtype="<f2").astype(np.float32)


class EmbedderWrapper:
    """Base of embedders that wrap another: same model id and dimensions as the inner one."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimensions(self) -> int:
        return self.inner.dimensions


class CachingEmbedder(EmbedderWrapper):
    """Wraps an embedder with a thread-safe LRU cache of rows keyed by a digest of the exact
    text (the text itself is not kept: a cached query is not readable from the process).
    It serves queries; a memory's own text is embedded past it (``uncached``).

    Same ``model_id`` and ``dimensions`` as the wrapped one. Each distinct text missing from
    the cache is sent to the wrapped embedder once per call (duplicates in a call share one
    row); two threads missing the same text at once may both compute it, which is harmless.
    """

    def __init__(self, inner: Embedder, capacity: int = 4096):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        super().__init__(inner)
        self.capacity = capacity
        self._rows: OrderedDict[bytes, Matrix] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return self.inner.embed([])
        found: dict[str, Matrix] = {}
        missing: dict[str, None] = {}  # insertion-ordered set
        with self._lock:
            for text in texts:
                if text in found or text in missing:
                    continue
                row = self._rows.get(_digest(text))
                if row is None:
                    missing[text] = None
                    continue
                self._rows.move_to_end(_digest(text))
                found[text] = row
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
        if missing:
            computed = self.inner.embed(list(missing))
            if computed.ndim != 2 or computed.shape[0] != len(missing):
                raise EmbedderUnavailable(
                    f"{self.model_id}: asked for {len(missing)} rows, got an array of shape {computed.shape}"
                )
            with self._lock:
                for text, row in zip(missing, computed, strict=True):
                    kept = np.array(row, dtype=np.float32)
                    kept.flags.writeable = False
                    found[text] = kept
                    self._rows[_digest(text)] = kept
                    self._rows.move_to_end(_digest(text))
                while len(self._rows) > self.capacity:
                    self._rows.popitem(last=False)
        return np.stack([found[text] for text in texts])


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def uncached(embedder: Embedder) -> Embedder:
    """``embedder`` past its query cache: what a memory's own text is embedded by (a write,
    a re-embedding, a document's chunks), so a memory's vector never lingers in a process's
    cache after the memory is erased; queries keep the cache."""
    while isinstance(embedder, CachingEmbedder):
        embedder = embedder.inner
    return embedder
