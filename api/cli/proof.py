"""``memwarden proof …``: fetch a proof from the local ledger into a file that carries
everything an auditor needs (the signed checkpoint note, the leaf, the path), and check such a
file with the client's verifier alone — ``proof verify`` needs no server and no database."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwarden.api.cli.erasure import read_certificate

if TYPE_CHECKING:  # the runtime and the client only when a command runs (api/cli/main.py)
    from memwarden.bootstrap.runtime import Runtime


def _runtime() -> Runtime:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - see api/cli/main.py on imports

    return Runtime(follow=False)


def _note_of(runtime: Runtime, size: int | None) -> tuple[int, str]:
    """(size, note) of the newest signed checkpoint (of ``size``, when given); one is made
    when none of that size exists yet."""
    from memwarden_client.proofs import ProofError  # noqa: PLC0415 - see api/cli/main.py on imports

    kept = runtime.ledger.checkpoint_log.with_size(size)
    if kept is None or kept.checkpoint.note is None or kept.checkpoint.size is None:
        made = runtime.ledger.checkpoint(runtime.reads.tree.root)
        assert made.note is not None
        assert made.size is not None
        if size is not None and made.size != size:
            raise ProofError(f"no checkpoint of size {size}; the newest is {made.size}")
        return made.size, made.note
    return kept.checkpoint.size, kept.checkpoint.note


def _inclusion_document(runtime: Runtime, position: int, size: int | None) -> dict[str, Any]:
    """An inclusion proof file: the signed checkpoint, the path, and the leaf's preimage (the
    position's canonical record), so the leaf proven can be read, not only hashed."""
    from memwarden.domain.ledger.notes import b64  # noqa: PLC0415 - see api/cli/main.py on imports

    size_, note = _note_of(runtime, size)
    found = runtime.reads.tree.inclusion(position, size_)
    return {
        "kind": "inclusion",
        "position": found.position,
        "leaf_index": found.leaf_index,
        "size": found.size,
        "leaf_hash": b64(found.leaf_hash),
        "proof": [b64(p) for p in found.proof],
        "record": b64(found.record),
        "checkpoint": note,
        "log_key": runtime.ledger.vkey,
    }


def cmd_proof_inclusion(args: argparse.Namespace) -> int:
    with _runtime() as runtime:
        document = _inclusion_document(runtime, args.position, args.size)
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def cmd_proof_certificate(args: argparse.Namespace) -> int:
    """A deletion certificate's proof file: the inclusion of its ErasureCertified event, with
    the record and the certificate, so ``proof verify`` checks the ledger recorded exactly it."""
    import msgspec  # noqa: PLC0415 - see api/cli/main.py on imports

    from memwarden.projections.merkle.records import certificate_position  # noqa: PLC0415

    try:
        certificate = read_certificate(args.file)
    except (OSError, ValueError) as error:
        sys.stderr.write(f"unreadable certificate {args.file}: {error}\n")
        return 1
    with _runtime() as runtime:
        tree = runtime.reads.tree
        position = certificate_position(tree.datastore, tree.schema, certificate.id)
        if position is None:
            sys.stderr.write(f"the ledger holds no certificate {certificate.id}\n")
            return 1
        document = _inclusion_document(runtime, position, args.size)
    document["certificate"] = json.loads(msgspec.json.encode(certificate))
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def cmd_proof_consistency(args: argparse.Namespace) -> int:
    from memwarden.domain.ledger.notes import b64  # noqa: PLC0415 - see api/cli/main.py on imports

    with _runtime() as runtime:
        first_size, first_note = _note_of(runtime, args.first)
        second_size, second_note = _note_of(runtime, args.second)
        found = runtime.reads.tree.consistency(first_size, second_size)
        vkey = runtime.ledger.vkey
    document = {
        "kind": "consistency",
        "first": first_size,
        "second": second_size,
        "proof": [b64(p) for p in found.proof],
        "first_checkpoint": first_note,
        "second_checkpoint": second_note,
        "log_key": vkey,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def cmd_proof_vkey(_args: argparse.Namespace) -> int:
    with _runtime() as runtime:
        sys.stdout.write(runtime.ledger.vkey + "\n")
    return 0


def cmd_proof_verify(args: argparse.Namespace) -> int:
    from memwarden_client.proofs import ProofError, VerifierKey  # noqa: PLC0415 - see api/cli/main.py
    from memwarden_client.records import verify_bound_proof_file  # noqa: PLC0415

    try:
        document = json.loads(Path(args.file).read_text())
        trusted = args.log_key or document.get("log_key", "")
        said = verify_bound_proof_file(document, VerifierKey.parse(trusted))
    except (OSError, ValueError, KeyError, TypeError, ProofError) as error:
        sys.stderr.write(f"NOT VERIFIED: {error}\n")
        return 1
    note = "" if args.log_key else " (with the key the file names: pass --log-key to check it against yours)"
    sys.stdout.write(f"verified: {said}{note}\n")
    return 0


def register(sub: Any) -> None:
    proof = sub.add_parser(
        "proof", help="RFC 6962 proofs of the ledger, and their offline check"
    ).add_subparsers(dest="proof_command", required=True)
    inclusion = proof.add_parser("inclusion", help="prove a ledger position is in a signed tree")
    inclusion.add_argument("position", type=int)
    inclusion.add_argument("--size", type=int, help="the checkpoint's tree size (default: the newest)")
    inclusion.set_defaults(handler=cmd_proof_inclusion)
    certificate = proof.add_parser(
        "certificate",
        help="prove a deletion certificate (a JSON file) is the ledger's record at its position",
    )
    certificate.add_argument("file")
    certificate.add_argument("--size", type=int, help="the checkpoint's tree size (default: the newest)")
    certificate.set_defaults(handler=cmd_proof_certificate)
    consistency = proof.add_parser("consistency", help="prove one signed tree extends another")
    consistency.add_argument("first", type=int)
    consistency.add_argument("second", type=int)
    consistency.set_defaults(handler=cmd_proof_consistency)
    verify = proof.add_parser("verify", help="check a proof file offline (no server, no database)")
    verify.add_argument("file")
    verify.add_argument("--log-key", help="the log's verifier key you trust")
    verify.set_defaults(handler=cmd_proof_verify)
    vkey = proof.add_parser("vkey", help="print the log's verifier key (give it to auditors and witnesses)")
    vkey.set_defaults(handler=cmd_proof_vkey)
