"""An embedder behind an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

The HTTP plumbing is :mod:`domain.endpoint`'s; msgspec JSON. Every failure -- refused
connection, timeout, HTTP error status, a body that is not the expected shape -- becomes
:class:`EmbedderUnavailable`, so callers can fall back to lexical search.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import msgspec
import numpy as np

from memwarden.domain.embedding.base import EmbedderUnavailable, Matrix, check_texts, normalize_rows
from memwarden.domain.endpoint import EndpointError, endpoint_url, post_json

MAX_INPUTS_PER_REQUEST = 128
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int


class _Response(msgspec.Struct):
    data: list[_Item]


class OpenAIEmbedder:
    """Texts in, unit rows out, via an OpenAI-compatible embeddings API.

    ``dimensions``, when given, is checked against every response; when not, it is learnt
    from the first response (reading the property before any call makes one small request).
    ``timeout`` bounds each connect and each read, in seconds. Empty strings, which the
    OpenAI API rejects, are sent as a single space.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        timeout: float = 5.0,
    ):
        url = endpoint_url(base_url, "embeddings", "embedder")
        if not model:
            raise ValueError("the embedder model name must not be empty")
        if dimensions is not None and dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        self.url = url
        self.model = model
        self.timeout = timeout
        self._api_key = api_key or None
        self._dimensions = dimensions
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the API key
        return f"OpenAIEmbedder(url={self.url!r}, model={self.model!r}, dimensions={self._dimensions})"

    @property
    def model_id(self) -> str:
        return self.model

    @property
    def dimensions(self) -> int:
        known = self._dimensions
        if known is None:
            self.embed(["dimensions"])
            known = self._dimensions
            if known is None:
                raise EmbedderUnavailable(f"{self.url}: the number of dimensions is not known yet")
        return known

    def embed(self, texts: Sequence[str]) -> Matrix:
        check_texts(texts)
        if not texts:
            return np.zeros((0, self._dimensions or 0), dtype=np.float32)
        chunks = [
            self._request([text or " " for text in texts[start : start + MAX_INPUTS_PER_REQUEST]])
            for start in range(0, len(texts), MAX_INPUTS_PER_REQUEST)
        ]
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def _request(self, texts: list[str]) -> Matrix:
        body = msgspec.json.encode({"model": self.model, "input": texts})
        try:
            payload = post_json(
                self.url, body, api_key=self._api_key, timeout=self.timeout, max_bytes=MAX_RESPONSE_BYTES
            )
        except EndpointError as exc:
            raise EmbedderUnavailable(str(exc)) from exc
        return self._rows(payload, len(texts))

    def _rows(self, payload: bytes, count: int) -> Matrix:
        try:
            items = msgspec.json.decode(payload, type=_Response).data
        except msgspec.MsgspecError as exc:
            raise EmbedderUnavailable(f"{self.url}: not an embeddings response: {exc}") from exc
        if sorted(item.index for item in items) != list(range(count)):
            raise EmbedderUnavailable(f"{self.url}: asked for {count} embeddings, the indexes do not match")
        items.sort(key=lambda item: item.index)
        widths = {len(item.embedding) for item in items}
        if len(widths) != 1 or 0 in widths:
            raise EmbedderUnavailable(f"{self.url}: embeddings of differing or zero lengths {sorted(widths)}")
        (width,) = widths
        with self._lock:
            if self._dimensions is None:
                self._dimensions = width
        if width != self._dimensions:
            raise EmbedderUnavailable(f"{self.url}: expected {self._dimensions} dimensions, got {width}")
        rows = np.array([item.embedding for item in items], dtype=np.float64)
        norms = np.linalg.norm(rows, axis=1)
        if not np.all(np.isfinite(rows)) or not np.all(norms > 0):
            raise EmbedderUnavailable(f"{self.url}: embeddings with non-finite values or zero length")
        return normalize_rows(rows / norms[:, np.newaxis])
