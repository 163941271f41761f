"""Signing and checking deletion certificates (ed25519, the checkpoint key).

The signature covers ``certificate_message`` (domain/model/certificates.py): every field
but the signature, canonically encoded. Public keys are looked up by ``key_id`` in
``signing_keys``, so a certificate signed before a key rotation still verifies.
"""

from __future__ import annotations

import base64

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from memwarden.domain.ledger.keys import SigningKey
from memwarden.domain.model.certificates import DeletionCertificate, certificate_message, certificate_problem


class CertificateCheck(msgspec.Struct, frozen=True, kw_only=True):
    valid: bool
    problem: str | None = None


def sign_certificate(certificate: DeletionCertificate, key: SigningKey) -> DeletionCertificate:
    if certificate.key_id != key.key_id:
        msg = "the certificate names another signing key"
        raise ValueError(msg)
    signature = key.sign(certificate_message(certificate))
    return msgspec.structs.replace(certificate, signature=base64.b64encode(signature).decode())


def check_certificate_signature(
    certificate: DeletionCertificate, public_keys: dict[str, bytes]
) -> CertificateCheck:
    problem = certificate_problem(certificate)
    if problem is not None:
        return CertificateCheck(valid=False, problem=problem)
    raw = public_keys.get(certificate.key_id)
    if raw is None:
        return CertificateCheck(valid=False, problem=f"unknown signing key {certificate.key_id!r}")
    try:
        signature = base64.b64decode(certificate.signature, validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, certificate_message(certificate))
    except (InvalidSignature, ValueError):
        return CertificateCheck(valid=False, problem="the signature does not verify")
    return CertificateCheck(valid=True)
