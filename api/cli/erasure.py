"""CLI commands of erasure: ``certificates verify FILE``, ``keys rotate-kek``."""

from __future__ import annotations

import argparse
import base64
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:  # the commands import what they run (api/cli/main.py)
    from memwarden.domain.ledger.keys import KeyEncryptionKey
    from memwarden.domain.model.certificates import DeletionCertificate


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        sys.stdout.write(msgspec.json.encode(data).decode() + "\n")
    else:
        sys.stdout.write(text + "\n")


def read_certificate(path: str) -> DeletionCertificate:
    """A certificate file: the certificate itself, or a forget response holding one."""
    from memwarden.domain.model.certificates import DeletionCertificate  # noqa: PLC0415 - see the note in main.py

    raw = msgspec.json.decode(Path(path).read_bytes())
    if isinstance(raw, dict) and isinstance(raw.get("certificate"), dict):
        raw = raw["certificate"]
    return msgspec.convert(raw, DeletionCertificate)


def cmd_certificates_verify(args: argparse.Namespace) -> int:
    try:
        certificate = read_certificate(args.file)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as error:
        _emit(
            args,
            {"valid": False, "problem": f"unreadable certificate: {error}"},
            f"INVALID: unreadable certificate {args.file}: {error}",
        )
        return 1
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        check = runtime.ledger.verify_certificate(certificate)
    text = (
        f"valid: certificate {certificate.id}, {_erased(certificate)} erased at {certificate.time.isoformat()}"
        f" (signed by key {certificate.key_id})"
        if check.valid
        else f"INVALID: {check.problem}"
    )
    _emit(args, check, text)
    return 0 if check.valid else 1


def _erased(certificate: DeletionCertificate) -> str:
    memories = f"{len(certificate.erased_ids)} memories"
    documents = len(certificate.erased_documents)
    return f"{memories} and {documents} knowledge documents" if documents else memories


def _new_kek(args: argparse.Namespace) -> KeyEncryptionKey:
    from memwarden.domain.ledger.keys import KEK_BYTES, KeyConfigError, KeyEncryptionKey  # noqa: PLC0415

    if args.new_kek_file:
        material = Path(args.new_kek_file).read_bytes()
        if len(material) != KEK_BYTES:
            try:
                material = base64.b64decode(material.strip(), validate=True)
            except ValueError as error:
                raise KeyConfigError("the new KEK file must hold 32 raw bytes or their base64") from error
        return KeyEncryptionKey(material)
    return KeyEncryptionKey(os.urandom(KEK_BYTES))


def cmd_keys_rotate_kek(args: argparse.Namespace) -> int:
    """Rewrap every data key and service secret with a new KEK; the ledger is untouched.

    With the file-based KEK (``data_dir/keys/kek.key``) the new key replaces the file.
    With ``MEMWARDEN_KEK`` the new key must be given (``--new-kek-file``) and the
    operator sets ``MEMWARDEN_KEK`` to it before the next start. Run with the service
    stopped.
    """
    from memwarden.domain.ledger.keys import KeyConfigError  # noqa: PLC0415 - see the note in main.py
    from memwarden.domain.settings import Settings  # noqa: PLC0415

    settings = Settings.from_env()
    try:
        new = _new_kek(args)
    except (OSError, KeyConfigError) as error:
        sys.stderr.write(f"refused: {error}\n")
        return 2
    configured = bool(settings.kek_b64)
    if configured and not args.new_kek_file:
        sys.stderr.write("MEMWARDEN_KEK is set: give the new key with --new-kek-file (32 bytes or base64)\n")
        return 2
    key_file = settings.keys_dir / "kek.key"
    staged = settings.keys_dir / "kek.key.next"
    if not configured:
        staged.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(new.key)
            handle.flush()
            os.fsync(handle.fileno())
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(settings, follow=False) as runtime:
        old_id = runtime.ledger.kek.key_id
        if old_id == new.key_id:
            sys.stderr.write("the new KEK is the current one\n")
            return 2
        keys, secrets = runtime.ledger.rotate_kek(new)
    if not configured:
        staged.replace(key_file)
        directory = os.open(settings.keys_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    where = (
        f"set MEMWARDEN_KEK to the base64 of {args.new_kek_file} before the next start"
        if configured
        else f"the new key is in {key_file}"
    )
    _emit(
        args,
        {"old_kek_id": old_id, "new_kek_id": new.key_id, "data_keys": keys, "secrets": secrets},
        f"rewrapped {keys} data keys and {secrets} secrets: KEK {old_id} -> {new.key_id}; {where}."
        " The old KEK now unwraps nothing.",
    )
    return 0


def register(sub: Any, keys: Any) -> None:
    """Add the erasure commands to the CLI's parsers."""
    certificates = sub.add_parser("certificates", help="deletion certificates").add_subparsers(
        dest="certificates_command", required=True
    )
    verify = certificates.add_parser("verify", help="verify a certificate file against the ledger")
    verify.add_argument("file")
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(handler=cmd_certificates_verify)

    rotate = keys.add_parser("rotate-kek", help="rewrap every data key with a new key-encryption key")
    rotate.add_argument("--new-kek-file", help="the new KEK (32 bytes or base64); default: generate one")
    rotate.add_argument("--json", action="store_true")
    rotate.set_defaults(handler=cmd_keys_rotate_kek)
