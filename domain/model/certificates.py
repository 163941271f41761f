"""Deletion certificates: what an erasure proves, and the exact bytes that get signed.

Pure: the signature itself is made and checked with the ledger's ed25519 key
(domain/ledger/certificates.py); this module only says what is signed.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Literal
from uuid import UUID

import msgspec

from memwarden.domain.model.text import normalize

CERTIFICATE_KIND = "memwarden-deletion-certificate-v1"
TargetKind = Literal["ids", "subject", "subtree"]


class DeletionCertificate(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A signed statement that these memories and knowledge documents were erased (their
    data keys destroyed).

    ``ledger_position``/``ledger_hash`` are the chain head the erasure was decided
    against; the erasure's own events follow it in the ledger. ``target`` is the
    erased subtree, or for a subject erasure a digest of the subject (the subject's
    name itself is personal data and is not repeated here). ``erased_ids`` are memories,
    ``erased_documents`` L3 knowledge documents; ``count`` is both together.
    """

    id: UUID
    kind: str = CERTIFICATE_KIND
    erased_ids: tuple[UUID, ...]
    erased_documents: tuple[UUID, ...] = ()
    count: int
    scope: str
    target_kind: TargetKind
    target: str | None = None
    ledger_position: int
    ledger_hash: str
    time: datetime
    requester: str
    requester_namespace: str
    requester_role: str
    reason: str
    key_id: str
    signature: str = ""


def certificate_message(certificate: DeletionCertificate) -> bytes:
    """The canonical bytes a certificate's signature covers: every field but the signature.

    ``erased_documents`` is covered only when it lists something: certificates signed before
    the field existed (and those that erased no document) keep exactly their old bytes, so
    their signatures still verify.
    """
    fields = msgspec.structs.asdict(certificate)
    fields.pop("signature")
    fields["time"] = certificate.time.astimezone(UTC).isoformat()
    fields["erased_ids"] = [str(i) for i in certificate.erased_ids]
    if certificate.erased_documents:
        fields["erased_documents"] = [str(i) for i in certificate.erased_documents]
    else:
        fields.pop("erased_documents")
    fields["id"] = str(certificate.id)
    return msgspec.json.encode(fields, order="sorted")


def certificate_problem(certificate: DeletionCertificate) -> str | None:
    """What is internally inconsistent about a certificate (signature aside), or None."""
    if certificate.kind != CERTIFICATE_KIND:
        return f"unknown certificate kind {certificate.kind!r}"
    memories, documents = certificate.erased_ids, certificate.erased_documents
    if certificate.count != len(memories) + len(documents):
        return "count does not match the erased ids and documents"
    if len(set(memories) | set(documents)) != len(memories) + len(documents):
        return "an erased id appears twice"
    if list(memories) != sorted(memories, key=str) or list(documents) != sorted(documents, key=str):
        return "erased ids are not in canonical order"
    if certificate.time.tzinfo is None:
        return "time has no zone"
    return None


def subject_digest(subject: str) -> str:
    """How a certificate names an erased data subject without repeating the name."""
    return hashlib.sha256(("memwarden-subject:" + normalize(subject)).encode()).hexdigest()
