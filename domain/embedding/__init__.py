"""Sentence embedders: offline MiniLM (default), an OpenAI-compatible service, or hashing for tests.

``import domain.embedding`` is light: onnxruntime and the tokenizer load only when a
:class:`MiniLMEmbedder` is made.
"""

from memwarden.domain.embedding.base import (
    CachingEmbedder,
    Embedder,
    EmbedderUnavailable,
    ModelFileRejected,
    embed_one,
    embed_rows,
    normalize_rows,
    uncached,
    vector_from_bytes,
    vector_to_bytes,
)
from memwarden.domain.embedding.batching import BatchingEmbedder
from memwarden.domain.embedding.factory import embedder_for_model, embedder_from_settings
from memwarden.domain.embedding.hashing import HashEmbedder
from memwarden.domain.embedding.minilm import MiniLMEmbedder, shared_minilm
from memwarden.domain.embedding.openai import OpenAIEmbedder

__all__ = [
    "BatchingEmbedder",
    "CachingEmbedder",
    "Embedder",
    "EmbedderUnavailable",
    "HashEmbedder",
    "MiniLMEmbedder",
    "ModelFileRejected",
    "OpenAIEmbedder",
    "embed_one",
    "embed_rows",
    "embedder_for_model",
    "embedder_from_settings",
    "normalize_rows",
    "shared_minilm",
    "uncached",
    "vector_from_bytes",
    "vector_to_bytes",
]
