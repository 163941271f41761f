"""Key material that lives outside the ledger: the key-encryption key and the signing key.

Both come from configuration, or from files created once in the data directory
(mode 0600) for the embedded default, so they persist across restarts.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from memwarden.domain.settings import Settings

KEK_BYTES = 32


class KeyConfigError(Exception):
    """Key material is missing, malformed or unreadable: nothing may proceed on a guess."""


def _read_or_create(path: Path, create: bytes) -> bytes:
    """Read the key file, creating it first if absent.

    The new key is written to a private temporary file and then hard-linked into place:
    linking fails if the file already exists, so when processes start together exactly
    one key wins and no reader ever sees a half-written file.
    """
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(create)
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):
                Path(path).hardlink_to(temporary)
        finally:
            Path(temporary).unlink()
    return path.read_bytes()


def key_id_of(material: bytes) -> str:
    return hashlib.sha256(material).hexdigest()[:16]


class KeyEncryptionKey:
    def __init__(self, key: bytes) -> None:
        if len(key) != KEK_BYTES:
            raise KeyConfigError(f"the key-encryption key must be {KEK_BYTES} bytes")
        self.key = key
        self.key_id = key_id_of(key)

    @classmethod
    def load(cls, settings: Settings) -> KeyEncryptionKey:
        if settings.kek_b64:
            try:
                return cls(base64.b64decode(settings.kek_b64, validate=True))
            except ValueError as error:
                raise KeyConfigError(f"MEMWARDEN_KEK is not valid base64: {error}") from error
        path = settings.keys_dir / "kek.key"
        return cls(_read_or_create(path, os.urandom(KEK_BYTES)))


def public_key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return key_id_of(raw)


def public_key_bytes(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


class SigningKey:
    """The ed25519 key that signs checkpoints, receipts and certificates."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self.private_key = private_key
        self.public_key = private_key.public_key()
        self.key_id = public_key_id(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)

    @classmethod
    def load(cls, settings: Settings) -> SigningKey:
        if settings.signing_key_pem:
            pem = settings.signing_key_pem.encode()
        else:
            fresh = Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            pem = _read_or_create(settings.keys_dir / "signing.pem", fresh)
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except ValueError as error:
            raise KeyConfigError(f"the signing key is not a valid PEM private key: {error}") from error
        if not isinstance(key, Ed25519PrivateKey):
            raise KeyConfigError("the signing key must be an ed25519 key")
        return cls(key)
