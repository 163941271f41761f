"""Claim stream ids: the optimistic-concurrency handles of the write path (a normalized
text, a slot, a source ref), each one stream whose id is derived from what it claims."""

from __future__ import annotations

import hashlib
import hmac
from uuid import UUID

from memwarden.domain.model.text import normalize, normalize_key


class ClaimIds:
    """Claim stream ids: keyed HMACs, so an id reveals nothing of the text it stands for."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _id(self, *parts: str) -> UUID:
        # surrogatepass: a lone surrogate still gets an id; the decider then rejects the write
        joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, joined, hashlib.sha256).digest()
        return UUID(bytes=digest[:16], version=4)

    def text(self, namespace: str, content: str) -> UUID:
        return self._id("text", namespace, normalize(content))

    def slot(self, namespace: str, subject: str, attribute: str) -> UUID:
        return self._id("slot", namespace, normalize_key(subject), normalize_key(attribute))

    def source_ref(self, namespace: str, source: str, ref: str) -> UUID:
        return self._id("source_ref", namespace, source, normalize_key(ref))
