"""The embedder the settings ask for.

``MEMWARDEN_EMBEDDER`` (``Settings.embedder``):

- ``minilm`` (the default): the bundled all-MiniLM-L6-v2 int8 model, in-process, cached.
- ``bge``: bge-small-en-v1.5 int8 (files shipped in memwarden's wheel, pinned), in-process,
  cached: better retrieval, about half MiniLM's speed.
- ``openai``: an OpenAI-compatible service, cached. ``MEMWARDEN_EMBEDDER_URL`` (the base URL,
  e.g. ``http://127.0.0.1:8080/v1``) and ``MEMWARDEN_EMBEDDER_MODEL`` are required;
  ``MEMWARDEN_EMBEDDER_API_KEY``, ``MEMWARDEN_EMBEDDER_DIMENSIONS`` and
  ``MEMWARDEN_EMBEDDER_TIMEOUT`` (seconds, default 5) are optional.
- ``hash``: feature hashing, no meaning; for tests only. ``hash-<dimensions>`` (e.g.
  ``hash-256``): another such model, for tests of a switch between two.
- ``none``: no embedder: no vectors are made and search is lexical only.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence

from memwarden.domain.embedding.base import CachingEmbedder, Embedder, Matrix
from memwarden.domain.embedding.batching import BatchingEmbedder
from memwarden.domain.embedding.bge import DIMENSIONS as BGE_DIMENSIONS
from memwarden.domain.embedding.bge import MODEL_ID as BGE_ID
from memwarden.domain.embedding.bge import shared_bge_small
from memwarden.domain.embedding.hashing import HASH_PREFIX, HashEmbedder
from memwarden.domain.embedding.minilm import DIMENSIONS as MINILM_DIMENSIONS
from memwarden.domain.embedding.minilm import MODEL_ID as MINILM_ID
from memwarden.domain.embedding.minilm import shared_minilm
from memwarden.domain.embedding.openai import OpenAIEmbedder
from memwarden.domain.settings import Settings

CHOICES = ("minilm", "bge", "openai", "hash", "hash-<dimensions>", "none")
log = logging.getLogger(__name__)


class WarmingModel:
    """A bundled model (its id and dimensions known without it). With ``warm`` it loads in
    a background thread from the moment this is made, so a process that starts does not
    wait the load before its first answer; without, it loads at its first use, so a process
    that never embeds (most CLI commands) carries no model. ``embed`` waits for it the
    first time (on the shared instance's lock), and raises there a load that failed (a
    file failing its pin)."""

    def __init__(
        self, shared: Callable[[], Embedder], model_id: str, dimensions: int, *, warm: bool = True
    ) -> None:
        self._shared = shared
        self._model_id = model_id
        self._dimensions = dimensions
        if warm:  # joined at exit
            threading.Thread(target=self._warm, name=f"warm-{model_id}").start()

    def _warm(self) -> None:
        try:
            self._shared()
        except Exception:
            log.exception("the embedding model did not load; the first embedding tries again")

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> Matrix:
        return self._shared().embed(texts)


def embedder_from_settings(
    settings: Settings, background: bool = False, *, lazy: bool = False
) -> Embedder | None:
    """The configured embedder, or ``None`` for ``none``. ``background``: a bundled model
    loads in a thread and is checked at first use (``WarmingModel``); ``lazy``: it loads
    at its first use only. A bundled model runs ``settings.model_lanes`` inference sessions
    when this call is the one that loads it.

    Raises ``ValueError`` for an unknown choice or incomplete ``openai`` settings, and
    :class:`~domain.embedding.base.ModelFileRejected` when a model's files fail their pins.
    """
    choice, lanes = settings.embedder, settings.model_lanes
    if choice == "none":
        return None
    if choice == "minilm":
        minilm = functools.partial(shared_minilm, threads=lanes)
        model: Embedder = (
            WarmingModel(minilm, MINILM_ID, MINILM_DIMENSIONS, warm=background)
            if background or lazy
            else minilm()
        )
        return CachingEmbedder(BatchingEmbedder(model))
    if choice == "bge":
        small = functools.partial(shared_bge_small, threads=lanes)
        bge: Embedder = (
            WarmingModel(small, BGE_ID, BGE_DIMENSIONS, warm=background) if background or lazy else small()
        )
        return CachingEmbedder(BatchingEmbedder(bge))
    if choice == "hash":
        return HashEmbedder()
    if choice.startswith("hash-") and choice[5:].isdigit() and int(choice[5:]) > 0:
        return HashEmbedder(int(choice[5:]))
    if choice == "openai":
        return CachingEmbedder(_openai(settings))
    raise ValueError(f"MEMWARDEN_EMBEDDER={choice!r} is not one of {', '.join(CHOICES)}")


def embedder_for_model(model_id: str) -> Embedder | None:
    """The embedder whose vectors are named ``model_id`` (what the search index serves may be
    another model than the configured one, until the switch): the bundled models and the
    hashing ones by their ids; None for any other (an OpenAI-compatible model is served only
    as the configured embedder, which the caller has)."""
    if model_id == MINILM_ID:
        return CachingEmbedder(BatchingEmbedder(shared_minilm()))
    if model_id == BGE_ID:
        return CachingEmbedder(BatchingEmbedder(shared_bge_small()))
    if model_id.startswith(HASH_PREFIX) and model_id[len(HASH_PREFIX) :].isdigit():
        return HashEmbedder(int(model_id[len(HASH_PREFIX) :]))
    return None


def _openai(settings: Settings) -> OpenAIEmbedder:
    url, model = settings.embedder_url, settings.embedder_model
    if not url:
        raise ValueError(
            "MEMWARDEN_EMBEDDER=openai needs MEMWARDEN_EMBEDDER_URL, the base URL of an "
            "OpenAI-compatible API (the one that serves POST <url>/embeddings)"
        )
    if not model:
        raise ValueError(
            "MEMWARDEN_EMBEDDER=openai needs MEMWARDEN_EMBEDDER_MODEL, the model name to ask for"
        )
    try:
        return OpenAIEmbedder(
            url,
            model,
            api_key=settings.embedder_api_key,
            dimensions=settings.embedder_dimensions,
            timeout=settings.embedder_timeout,
        )
    except ValueError as exc:
        raise ValueError(f"MEMWARDEN_EMBEDDER=openai: {exc}") from exc
