"""Check memwarden's transparency proofs without the server: signed-note checkpoints (C2SP
``signed-note``, ``tlog-checkpoint``), witness cosignatures (C2SP ``tlog-cosignature``, Ed25519),
and RFC 9162 §2.1 inclusion and consistency proofs. Nothing here but ``hashlib``, ``base64``
and ``cryptography``: an auditor needs no memwarden code to trust what it checks.

A verifier key (*vkey*) is ``name+hex(key id)+base64(type ‖ public key)``; the log's is printed
by ``memwarden proof vkey`` and served with every checkpoint.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
MAX_SIGNATURES = 64


class ProofError(ValueError):
    """A note, signature or proof that does not verify (the message says what failed)."""


# -- RFC 9162 §2.1 --------------------------------------------------------------------------


def leaf_hash(record: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + record).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """The root that ``proof`` leads to from leaf ``index`` of a tree of ``size`` (§2.1.3.2)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is outside a tree of {size}")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = _node(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = _node(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> None:
    """Raise ProofError unless ``leaf`` is leaf ``index`` of the tree of ``size`` with ``root``."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError("the inclusion proof does not lead to the checkpoint's root")


def verify_consistency(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> None:
    """Raise ProofError unless the tree of ``first`` leaves and root ``first_root`` is a
    prefix of the tree of ``second`` leaves and root ``second_root`` (§2.1.4.2)."""
    if _trivially_consistent(first, second, first_root, second_root, proof):
        return
    path = list(proof)
    if not path:
        raise ProofError("an empty consistency proof between different sizes")
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            fr, sr = _node(c, fr), _node(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = _node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0 or fr != first_root or sr != second_root:
        raise ProofError("the consistency proof does not join the two roots: the log forked or was rewritten")


def _trivially_consistent(
    first: int, second: int, first_root: bytes, second_root: bytes, proof: list[bytes]
) -> bool:
    """The cases RFC 9162 settles without a path: equal sizes, or an empty first tree."""
    if not 0 <= first <= second:
        raise ProofError(f"no tree of {second} leaves extends one of {first}")
    if first == second:
        if proof or first_root != second_root:
            raise ProofError("two checkpoints of one size with different roots: a fork")
        return True
    if first == 0:
        if proof:
            raise ProofError("the empty tree needs no consistency proof")
        return True
    return False


# -- signed notes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    kind: int
    public_key: bytes

    @classmethod
    def parse(cls, vkey: str) -> VerifierKey:
        try:
            name, key_hex, material = vkey.strip().split("+", 2)
            raw = base64.b64decode(material, validate=True)
            key_id = bytes.fromhex(key_hex)
        except ValueError as error:
            raise ProofError("not a verifier key (name+hex id+base64 key)") from error
        if len(key_id) != 4 or len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1):
            raise ProofError("only Ed25519 and Ed25519 cosignature verifier keys are supported")
        found = cls(name=name, key_id=key_id, kind=raw[0], public_key=raw[1:])
        if key_id != note_key_id(name, raw[0], raw[1:]):
            raise ProofError("the verifier key's id does not match its name and key")
        return found

    def encode(self) -> str:
        material = base64.b64encode(bytes([self.kind]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"


def note_key_id(name: str, kind: int, public_key: bytes) -> bytes:
    """SHA-256(name ‖ 0x0A ‖ type ‖ public key)[:4], the signed-note key id."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public_key).digest()[:4]


@dataclass(frozen=True)
class Signature:
    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class Note:
    text: str
    """The signed text, ending in a newline."""
    signatures: tuple[Signature, ...]

    @classmethod
    def parse(cls, note: str) -> Note:
        if any(ord(c) < 0x20 and c != "\n" for c in note):
            raise ProofError("a signed note holds no control characters but newlines")
        text, separator, block = note.rpartition("\n\n")
        if not separator or not text:
            raise ProofError("a signed note is its text, a blank line, then its signatures")
        lines = block.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines or len(lines) > MAX_SIGNATURES:
            raise ProofError("a signed note carries between 1 and 64 signatures")
        return cls(text=text + "\n", signatures=tuple(_signature_line(line) for line in lines))

    def verified_by(self, key: VerifierKey, message: bytes | None = None) -> Signature:
        """The signature of ``key`` on this note, checked; ProofError when it is missing or
        does not verify. ``message``: what the key signs, when not the text itself."""
        for sig in self.signatures:
            if sig.name == key.name and sig.key_id == key.key_id:
                body = sig.signature[8:] if key.kind == COSIGNATURE_V1 else sig.signature
                try:
                    Ed25519PublicKey.from_public_bytes(key.public_key).verify(
                        body, message or self.text.encode()
                    )
                except (InvalidSignature, ValueError) as error:
                    raise ProofError(f"the signature of {key.name} does not verify") from error
                return sig
        raise ProofError(f"the note carries no signature of {key.name}")


def _signature_line(line: str) -> Signature:
    if not line.startswith("\u2014 "):
        raise ProofError("a signature line starts with an em dash and a space")
    name, space, encoded = line[2:].rpartition(" ")
    if not space or not name:
        raise ProofError("a signature line is: em dash, key name, base64 signature")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError as error:
        raise ProofError("a signature is base64") from error
    if len(raw) < 5:
        raise ProofError("a signature is a key id and a signature")
    return Signature(name=name, key_id=raw[:4], signature=raw[4:])


@dataclass(frozen=True)
class Checkpoint:
    """A C2SP tlog-checkpoint: origin, tree size, root hash, and extension lines."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...]
    note: Note

    @classmethod
    def verify(cls, note_text: str, log_key: VerifierKey) -> Checkpoint:
        """The checkpoint in ``note_text`` once the log's signature on it verifies."""
        note = Note.parse(note_text)
        note.verified_by(log_key)
        lines = note.text.split("\n")[:-1]
        if len(lines) < 3 or any(not line for line in lines):
            raise ProofError("a checkpoint is at least origin, size and root hash, none of them empty")
        origin, size_line, root_line, *extensions = lines
        if origin != log_key.name:
            raise ProofError(f"the checkpoint is of {origin!r}, not of the key's log {log_key.name!r}")
        if not size_line.isdigit() or (size_line.startswith("0") and size_line != "0"):
            raise ProofError("the tree size is a decimal without leading zeroes")
        try:
            root = base64.b64decode(root_line, validate=True)
        except ValueError as error:
            raise ProofError("the root hash is base64") from error
        if len(root) != 32:
            raise ProofError("the root hash is 32 bytes")
        return cls(origin=origin, size=int(size_line), root=root, extensions=tuple(extensions), note=note)


def cosignature_message(checkpoint_text: str, timestamp: int) -> bytes:
    """What an Ed25519 cosigner signs (tlog-cosignature v1)."""
    return f"cosignature/v1\ntime {timestamp}\n".encode() + checkpoint_text.encode()


def cosignature_time(checkpoint: Checkpoint, witness: VerifierKey) -> int:
    """The time (POSIX seconds) at which ``witness`` cosigned ``checkpoint``, checked."""
    for sig in checkpoint.note.signatures:
        if sig.name == witness.name and sig.key_id == witness.key_id:
            if len(sig.signature) != 72:
                raise ProofError("an Ed25519 cosignature is a timestamp and a 64-byte signature")
            (timestamp,) = struct.unpack(">Q", sig.signature[:8])
            checkpoint.note.verified_by(witness, cosignature_message(checkpoint.note.text, timestamp))
            return int(timestamp)
    raise ProofError(f"the checkpoint carries no cosignature of {witness.name}")


# -- proof files ----------------------------------------------------------------------------


def verify_proof_file(document: dict[str, Any], log_key: VerifierKey) -> str:
    """What a proof file (``memwarden proof inclusion|consistency``) proves, in a sentence,
    once every check passed against ``log_key``; ProofError otherwise."""
    if document.get("kind") == "inclusion":
        checkpoint = Checkpoint.verify(document["checkpoint"], log_key)
        if checkpoint.size != document["size"]:
            raise ProofError("the proof is for another tree size than its checkpoint")
        proof = [base64.b64decode(p) for p in document["proof"]]
        verify_inclusion(
            document["leaf_index"],
            checkpoint.size,
            base64.b64decode(document["leaf_hash"]),
            proof,
            checkpoint.root,
        )
        return f"ledger position {document['position']} is in the log's tree of {checkpoint.size} (root signed by {log_key.name})"
    if document.get("kind") == "consistency":
        first = Checkpoint.verify(document["first_checkpoint"], log_key)
        second = Checkpoint.verify(document["second_checkpoint"], log_key)
        proof = [base64.b64decode(p) for p in document["proof"]]
        verify_consistency(first.size, second.size, first.root, second.root, proof)
        return (
            f"the log's tree of {second.size} extends its tree of {first.size}: history was only appended to"
        )
    raise ProofError("not a memwarden proof file (kind inclusion or consistency)")
