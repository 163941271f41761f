"""``memwarden proof …``: fetch a proof from the local ledger into a file that carries
everything an auditor needs (the signed checkpoint note, the leaf, the path), and check such a
file with the client's verifier alone — ``proof verify`` needs no server and no database."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memwarden_client.proofs import ProofError, VerifierKey, verify_proof_file

if TYPE_CHECKING:
    from memwarden.bootstrap.runtime import Runtime


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


def _note_of(runtime: Runtime, size: int | None) -> tuple[int, str]:
    """(size, note) of the newest signed checkpoint (of ``size``, when given); one is made
    when none of that size exists yet."""
    kept = runtime.ledger.checkpoint_log.with_size(size) if size is not None else None
    if kept is None and size is None:
        newest = [k for k in runtime.ledger.checkpoint_log.newest(50) if k.checkpoint.note]
        kept = newest[0] if newest else None
    if kept is None or kept.checkpoint.note is None or kept.checkpoint.size is None:
        made = runtime.ledger.checkpoint(runtime.reads.tree.root)
        assert made.note is not None
        assert made.size is not None
        if size is not None and made.size != size:
            raise ProofError(f"no checkpoint of size {size}; the newest is {made.size}")
        return made.size, made.note
    return kept.checkpoint.size, kept.checkpoint.note


def cmd_proof_inclusion(args: argparse.Namespace) -> int:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        size, note = _note_of(runtime, args.size)
        found = runtime.reads.tree.inclusion(args.position, size)
        vkey = runtime.ledger.vkey
    document = {
        "kind": "inclusion",
        "position": found.position,
        "leaf_index": found.leaf_index,
        "size": found.size,
        "leaf_hash": _b64(found.leaf_hash),
        "proof": [_b64(p) for p in found.proof],
        "checkpoint": note,
        "log_key": vkey,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def cmd_proof_consistency(args: argparse.Namespace) -> int:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        first_size, first_note = _note_of(runtime, args.first)
        second_size, second_note = _note_of(runtime, args.second)
        found = runtime.reads.tree.consistency(first_size, second_size)
        vkey = runtime.ledger.vkey
    document = {
        "kind": "consistency",
        "first": first_size,
        "second": second_size,
        "proof": [_b64(p) for p in found.proof],
        "first_checkpoint": first_note,
        "second_checkpoint": second_note,
        "log_key": vkey,
    }
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return 0


def cmd_proof_vkey(_args: argparse.Namespace) -> int:
    from memwarden.bootstrap.runtime import Runtime  # noqa: PLC0415 - loads the models' code: only commands that run it

    with Runtime(follow=False) as runtime:
        sys.stdout.write(runtime.ledger.vkey + "\n")
    return 0


def cmd_proof_verify(args: argparse.Namespace) -> int:
    try:
        document = json.loads(Path(args.file).read_text())
        trusted = args.log_key or document.get("log_key", "")
        said = verify_proof_file(document, VerifierKey.parse(trusted))
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
