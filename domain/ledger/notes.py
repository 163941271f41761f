"""Checkpoints as C2SP signed notes (``tlog-checkpoint`` over ``signed-note``, Ed25519): the
origin, the tree size and the RFC 6962 root, with the chain head as an extension line, signed
with the ledger's key under the origin's name. Existing transparency tooling reads them, and
``memwarden_client.proofs`` checks them without this code."""

from __future__ import annotations

import base64
import hashlib

from memwarden.domain.ledger.keys import SigningKey, public_key_bytes

ED25519 = 0x01


def b64(value: bytes) -> str:
    """Standard base64 with padding, as signed notes and the proof answers carry hashes."""
    return base64.b64encode(value).decode()


def note_key_id(name: str, kind: int, public_key: bytes) -> bytes:
    """SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4] (signed-note)."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public_key).digest()[:4]


def log_vkey(origin: str, key: SigningKey) -> str:
    """The verifier key of the log: ``origin+hex(key id)+base64(0x01 ‖ public key)``."""
    public = public_key_bytes(key.public_key)
    material = b64(bytes([ED25519]) + public)
    return f"{origin}+{note_key_id(origin, ED25519, public).hex()}+{material}"


def checkpoint_text(origin: str, size: int, root: bytes, extensions: tuple[str, ...] = ()) -> str:
    return "".join(f"{line}\n" for line in (origin, str(size), b64(root), *extensions))


def signed_checkpoint(
    key: SigningKey, origin: str, size: int, root: bytes, extensions: tuple[str, ...]
) -> str:
    """The checkpoint note: its text, a blank line, the log's signature line."""
    text = checkpoint_text(origin, size, root, extensions)
    public = public_key_bytes(key.public_key)
    signature = note_key_id(origin, ED25519, public) + key.sign(text.encode())
    return f"{text}\n\u2014 {origin} {b64(signature)}\n"


def default_origin(key: SigningKey) -> str:
    """A log's origin when none is configured: stable for as long as its signing key."""
    return f"memwarden.local/{hashlib.sha256(public_key_bytes(key.public_key)).hexdigest()[:16]}"
