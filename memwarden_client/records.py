"""What a leaf of memwarden's tree says, checked offline with ``hashlib`` alone.

An inclusion proof shows that *some* leaf hash sits at a ledger position under a signed root;
this module ties that leaf to a document the auditor holds. A proof file that carries the
leaf's preimage (``record``: the ledger's canonical form of the event) lets anyone check that
SHA-256(0x00 ‖ record) is the proven leaf, read the record's position, stream, version and
type, and — for a deletion certificate — that the event recorded is exactly the certificate in
hand. The canonical form (docs/proofs.md "What a leaf is"):

    position (int64 BE) ‖ stream id (16 bytes) ‖ version (int64 BE)
    ‖ len(type) (int32 BE) ‖ type (UTF-8) ‖ len(state) (int32 BE) ‖ state

``state`` is the event's JSON, with the fields that hold personal data sealed (encrypted):
an erased memory's leaf keeps its ciphertext and still proves.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from typing import Any
from uuid import UUID

from memwarden_client.proofs import ProofError, VerifierKey, leaf_hash, verify_proof_file

CERTIFIED_TYPE = "ErasureCertified"


class LedgerRecord:
    """One event's canonical record, parsed (every length checked)."""

    __slots__ = ("position", "state", "stream", "type", "version")

    def __init__(self, position: int, stream: UUID, version: int, type_: str, state: bytes) -> None:
        self.position = position
        self.stream = stream
        self.version = version
        self.type = type_
        self.state = state

    @classmethod
    def parse(cls, record: bytes) -> LedgerRecord:
        try:
            position, stream, version = struct.unpack_from(">q16sq", record, 0)
            at = 32
            (type_length,) = struct.unpack_from(">i", record, at)
            at += 4
            type_ = record[at : at + type_length].decode()
            at += type_length
            (state_length,) = struct.unpack_from(">i", record, at)
            at += 4
        except (struct.error, UnicodeDecodeError) as error:
            raise ProofError(f"not a ledger record: {error}") from error
        if type_length < 0 or state_length < 0 or at + state_length != len(record):
            raise ProofError("not a ledger record: its lengths do not add up to its size")
        return cls(position, UUID(bytes=stream), version, type_, record[at:])

    def event(self) -> dict[str, Any]:
        """The event's fields as recorded (sealed fields stay ciphertext)."""
        try:
            decoded = json.loads(self.state)
        except ValueError as error:
            raise ProofError(f"the record's event is not JSON: {error}") from error
        if not isinstance(decoded, dict):
            raise ProofError("the record's event is not a JSON object")
        return decoded


def record_of(document: dict[str, Any]) -> LedgerRecord:
    """The record an inclusion proof file carries, checked against the leaf it proves and
    the position it names."""
    try:
        record = base64.b64decode(document["record"], validate=True)
        leaf = base64.b64decode(document["leaf_hash"], validate=True)
    except (KeyError, TypeError, binascii.Error) as error:
        raise ProofError(f"the proof file carries no readable record: {error}") from error
    if leaf_hash(record) != leaf:
        raise ProofError("the record is not the proven leaf: SHA-256(0x00 || record) differs")
    parsed = LedgerRecord.parse(record)
    if parsed.position != document.get("position"):
        raise ProofError(
            f"the record is position {parsed.position}, the proof names {document.get('position')}"
        )
    return parsed


def check_certificate(record: LedgerRecord, certificate: dict[str, Any]) -> None:
    """The record is the ledger's ErasureCertified event of exactly ``certificate``."""
    if record.type != CERTIFIED_TYPE:
        raise ProofError(f"the record is a {record.type} event, not a certified erasure")
    recorded = record.event().get("certificate")
    if recorded != certificate:
        raise ProofError("the certificate differs from the one the ledger recorded at that position")
    if str(record.stream) != certificate.get("id"):
        raise ProofError("the record belongs to another certificate's stream")


def verify_bound_proof_file(document: dict[str, Any], log_key: VerifierKey) -> str:
    """``verify_proof_file``, and for an inclusion proof that carries its record (and
    possibly a certificate), that the leaf proven is that record (and that certificate)."""
    said = verify_proof_file(document, log_key)
    if document.get("kind") != "inclusion" or "record" not in document:
        return said
    record = record_of(document)
    said += f"; the leaf is its {record.type} event (stream {record.stream}, version {record.version})"
    certificate = document.get("certificate")
    if certificate is not None:
        if not isinstance(certificate, dict):
            raise ProofError("the proof file's certificate is not a JSON object")
        check_certificate(record, certificate)
        said += f"; it records deletion certificate {certificate.get('id')} exactly as given"
    return said
