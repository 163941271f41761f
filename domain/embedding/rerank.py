"""ms-marco-MiniLM-L-12-v2 (int8 ONNX): a cross-encoder that scores (query, passage) pairs.

A cross-encoder reads the query and a passage together, so it sees what an embedding of
each alone cannot (which words answer which); it is far too slow to run over a whole
namespace, so search runs it over the hybrid driver's top candidates only
(``projections/search/drivers.py``, ``RerankingDriver``). The files ship inside
memwarden's wheel (``assets/ms_marco_minilm_l12/``, with the model's licence and a NOTICE
naming where the int8 files came from), each pinned by SHA-256 and checked before it is
loaded; the model is Microsoft's MS MARCO cross-encoder as sentence-transformers publishes
it (Apache-2.0).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memwarden.domain.embedding.base import Matrix, check_texts
from memwarden.domain.embedding.onnx import Encoded, ModelSpec, OnnxEncoder, PinnedFile, Shared, by_length
from memwarden.domain.settings import Settings

MODEL_ID = "ms-marco-MiniLM-L-12-v2-int8"
MAX_TOKENS = 512
FOLDER = Path(__file__).parent / "assets" / "ms_marco_minilm_l12"
MAX_RERANK_DEPTH = 100
MODEL_SHA256 = "1225ccd6afd0f1b43a1b08bf67cd1cb68c05aafb443e9d8450015b8b3837ffd1"
TOKENIZER_SHA256 = "cb374d6bc042c22455946f4e09a89d29882a199fdaf8fb25be00dc8b8857a448"

MS_MARCO = ModelSpec(
    model_id=MODEL_ID,
    model=PinnedFile(MODEL_SHA256, "memwarden", path=FOLDER / "model.onnx"),
    tokenizer=PinnedFile(TOKENIZER_SHA256, "memwarden", path=FOLDER / "tokenizer.json"),
    max_tokens=MAX_TOKENS,
    output="logits",
)


class CrossEncoder:
    """Relevance logits of passages to a query (higher: more relevant). Thread-safe."""

    def __init__(
        self,
        spec: ModelSpec = MS_MARCO,
        model_path: str | os.PathLike[str] | None = None,
        tokenizer_path: str | os.PathLike[str] | None = None,
        *,
        threads: int | None = None,
        batch_size: int = 16,
        max_tokens: int | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._encoder = OnnxEncoder(spec, model_path, tokenizer_path, threads=threads, max_tokens=max_tokens)
        self._batch_size = batch_size
        self.model_id = spec.model_id

    @property
    def lanes(self) -> int:
        """Its inference sessions: how many batches it scores at once."""
        return self._encoder.lanes

    def score(self, query: str, passages: Sequence[str]) -> Matrix:
        """float32, one logit per passage, in the passages' order."""
        check_texts(passages)
        rows = np.empty((len(passages), 1), dtype=np.float32)
        if not passages:
            return rows[:, 0]
        pairs = [self._encoder.encode(query, passage) for passage in passages]
        # Even batches: a batch pads every pair to its longest, and the candidates of one
        # search are of mixed lengths, so fixed batches of the sorted pairs spent much of the
        # model's time on the padding of their long tail (docs/benchmarks.md, issue 27).
        lanes = self._encoder.lanes
        return by_length(pairs, self._batch_size, self._logits, rows, even=True, lanes=lanes)[:, 0]

    def _logits(self, batch: list[Encoded]) -> Matrix:
        logits, _mask = self._encoder.run(batch)
        return logits.reshape(len(batch), -1)[:, :1]


shared_cross_encoder: Shared[CrossEncoder] = Shared(CrossEncoder)
"""The process-wide cross-encoder, made on first use; thread-safe."""


RERANK_CHOICES = ("none", "ms-marco")
log = logging.getLogger(__name__)


class WarmingCrossEncoder:
    """The process's cross-encoder. With ``warm`` (an API process) it loads in a background
    thread from the moment this is made, so the process does not wait the model's load
    before its first answer; without (the projector, a worker, a CLI command: processes
    that seldom or never search) nothing loads until a search reranks, so a process that
    never does carries no model. ``score`` waits for the load the first time (on the shared
    instance's lock). A load that fails (a file failing its pin) is tried again by
    ``score``, which raises it where a search sees it."""

    def __init__(
        self,
        *,
        warm: bool = True,
        shared: Shared[CrossEncoder] | None = None,
        lanes: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._instance = shared_cross_encoder if shared is None else shared
        self._shared = functools.partial(self._instance, threads=lanes, max_tokens=max_tokens)
        if warm:  # joined at exit: a daemon killed mid-load aborts onnxruntime
            threading.Thread(target=self._warm, name="rerank-warm").start()

    def _warm(self) -> None:
        try:
            self._shared()
        except Exception:
            log.exception("the cross-encoder did not load; the first search that reranks tries again")

    @property
    def loaded(self) -> bool:
        """Whether the model is in this process's memory (made by a search or the warm-up)."""
        return self._instance.made

    def score(self, query: str, passages: Sequence[str]) -> Matrix:
        return self._shared().score(query, passages)


def reranker_from_settings(
    settings: Settings, background: bool = False, *, lazy: bool = False
) -> tuple[CrossEncoder | WarmingCrossEncoder | None, int | None]:
    """``MEMWARDEN_RERANK`` (``ms-marco``, the default, or ``none``) and
    ``MEMWARDEN_RERANK_DEPTH`` (how many of the hybrid driver's best it reorders; ``None``:
    the driver's default). ``ValueError`` for an unknown choice or a depth above
    ``MAX_RERANK_DEPTH``; :class:`~domain.embedding.base.ModelFileRejected` when the files
    fail their pins. ``background``: the model loads in a thread, checked at first use;
    ``lazy``: it loads at first use only (a process that never reranks never loads it).
    It runs ``settings.model_lanes`` inference sessions, reading at most
    ``settings.rerank_max_tokens`` tokens of each pair, when this call loads it."""
    choice, depth, lanes = settings.rerank, settings.rerank_depth, settings.model_lanes
    tokens = settings.rerank_max_tokens
    if choice not in RERANK_CHOICES:
        raise ValueError(f"MEMWARDEN_RERANK={choice!r} is not one of {', '.join(RERANK_CHOICES)}")
    if depth is not None and depth > MAX_RERANK_DEPTH:
        raise ValueError(f"MEMWARDEN_RERANK_DEPTH must be at most {MAX_RERANK_DEPTH}, got {depth}")
    reranker: CrossEncoder | WarmingCrossEncoder | None = None
    if choice == "ms-marco":
        lazily = background or lazy
        reranker = (
            WarmingCrossEncoder(warm=background, lanes=lanes, max_tokens=tokens)
            if lazily
            else shared_cross_encoder(threads=lanes, max_tokens=tokens)
        )
    return reranker, depth
