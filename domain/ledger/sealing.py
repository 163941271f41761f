"""Data keys (AES-256-GCM), one per memory or knowledge document, wrapped by the KEK.

Data keys are stored outside the ledger in ``data_keys`` (the ``memory_id`` column holds
the owner: a memory's id or a document's); destroying a row makes the sealed fields of
that owner's events unrecoverable while the ledger stays intact.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from memwarden.domain.ledger.entropy import random_bytes
from memwarden.domain.ledger.keys import KeyEncryptionKey

NONCE_BYTES = 12
DATA_KEY_BYTES = 32
_WRAP_AAD = b"memwarden data key v1:"


class SealingError(Exception):
    """A ciphertext failed authentication or a key could not be unwrapped."""


def seal(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    nonce = random_bytes(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def unseal(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag as error:
        raise SealingError("sealed data failed authentication") from error


def wrap_key(kek: KeyEncryptionKey, owner: UUID, data_key: bytes) -> bytes:
    return seal(kek.key, data_key, _WRAP_AAD + owner.bytes)


def unwrap_key(kek: KeyEncryptionKey, owner: UUID, wrapped: bytes) -> bytes:
    return unseal(kek.key, wrapped, _WRAP_AAD + owner.bytes)


WrappedLoader = Callable[[list[UUID]], dict[UUID, bytes]]


class DataKeys:
    """A bounded cache of unwrapped data keys in front of the ``data_keys`` table."""

    def __init__(self, kek: KeyEncryptionKey, load_wrapped: WrappedLoader, capacity: int = 50_000):
        self.kek = kek
        self._load_wrapped = load_wrapped
        self._capacity = capacity
        self._cache: OrderedDict[UUID, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, owner: UUID) -> tuple[bytes, bytes]:
        """A new data key and its wrapped form. Not cached: it is the owner's key only once
        the append that stores it commits (``remember``); a lost race stores another."""
        data_key = random_bytes(DATA_KEY_BYTES)
        return data_key, wrap_key(self.kek, owner, data_key)

    def remember(self, keys: Iterable[tuple[UUID, bytes]]) -> None:
        """Cache keys that were just stored."""
        for owner, key in keys:
            self._remember(owner, key)

    def get(self, owner: UUID) -> bytes | None:
        with self._lock:
            key = self._cache.get(owner)
            if key is not None:
                self._cache.move_to_end(owner)
                return key
        self.prefetch([owner])
        with self._lock:
            return self._cache.get(owner)

    def prefetch(self, owners: Iterable[UUID]) -> None:
        with self._lock:
            missing = [o for o in dict.fromkeys(owners) if o not in self._cache]
        if not missing:
            return
        for owner, wrapped in self._load_wrapped(missing).items():
            self._remember(owner, unwrap_key(self.kek, owner, wrapped))

    def rekey(self, kek: KeyEncryptionKey) -> None:
        """After a KEK rotation: wrap with the new KEK; cached plaintext keys stay valid."""
        with self._lock:
            self.kek = kek

    def forget(self, owners: Iterable[UUID]) -> None:
        with self._lock:
            for owner in owners:
                self._cache.pop(owner, None)

    def _remember(self, owner: UUID, key: bytes) -> None:
        with self._lock:
            self._cache[owner] = key
            self._cache.move_to_end(owner)
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
