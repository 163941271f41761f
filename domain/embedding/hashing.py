"""A deterministic feature-hashing embedder. For unit tests only: it knows no meaning.

Texts that share words and spellings get close vectors; synonyms and paraphrases do not.
It needs no model and no network, so tests of the code around embeddings can run anywhere.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

from memwarden.domain.embedding.base import Matrix, normalize_rows

_WORD = re.compile(r"\w+")
_PERSON = b"memwarden-hash1"
_TRIGRAM_WEIGHT = 0.5
_EMPTY_FEATURE = "e:"
HASH_PREFIX = "feature-hash-v1-"
"""A hashing model's id: this, then its dimensions."""


class HashEmbedder:
    """Feature hashing (blake2b, signed) of lowercased word tokens and their character trigrams.

    For unit tests only. Every row has unit length; the empty text gets a fixed vector of its own.
    """

    def __init__(self, dimensions: int = 384):
        if dimensions < 1:
            raise ValueError("dimensions must be at least 1")
        self._dimensions = dimensions

    @property
    def model_id(self) -> str:
        return f"{HASH_PREFIX}{self._dimensions}"

    @property
    def dimensions(self) -> int:
        return self._dimensions

    def embed(self, texts: Sequence[str]) -> Matrix:
        rows = np.zeros((len(texts), self._dimensions), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            features = _features(text)
            for feature, weight in features or [(_EMPTY_FEATURE, 1.0)]:
                index, sign = self._slot(feature)
                row[index] += sign * weight
        return normalize_rows(rows)

    def _slot(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=_PERSON).digest()
        value = int.from_bytes(digest, "little")
        return (value >> 1) % self._dimensions, (1.0 if value & 1 else -1.0)


def _features(text: str) -> list[tuple[str, float]]:
    features: list[tuple[str, float]] = []
    for word in _WORD.findall(text.lower()):
        features.append((f"w:{word}", 1.0))
        padded = f"<{word}>"
        features.extend((f"c:{padded[i : i + 3]}", _TRIGRAM_WEIGHT) for i in range(len(padded) - 2))
    return features
