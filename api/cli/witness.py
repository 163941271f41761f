"""``memwarden witness``: an independent witness of a memwarden log (C2SP tlog-witness, in
spirit). It keeps its own Ed25519 key and state file; for each new checkpoint it checks the
log's signature and an RFC 6962 consistency proof from the last checkpoint it cosigned, and
only then cosigns (C2SP tlog-cosignature v1) and posts the cosignature to the server. A
checkpoint that is not consistent with what it cosigned before is refused, and both notes are
kept as evidence: an operator who rewrites history and re-signs it cannot get a witness to
cosign the fork. It trusts nothing of the server but what it verifies, with
``memwarden_client.proofs`` alone.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # an HTTP client and cryptography only when a witness runs (api/cli/main.py)
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from memwarden_client.proofs import Checkpoint, VerifierKey

FORK = 3
"""The exit status of a witness that found the log inconsistent with what it cosigned."""


class Witness:
    def __init__(self, name: str, key: Ed25519PrivateKey) -> None:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - see the imports above

        from memwarden_client.proofs import COSIGNATURE_V1, VerifierKey, note_key_id  # noqa: PLC0415

        self.name = name
        self.key = key
        public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.vkey = VerifierKey(name, note_key_id(name, COSIGNATURE_V1, public), COSIGNATURE_V1, public)

    def cosign(self, checkpoint: Checkpoint, now: int) -> str:
        """The cosignature line of ``checkpoint`` at POSIX time ``now``."""
        from memwarden_client.proofs import cosignature_message  # noqa: PLC0415 - see the imports above

        signature = self.key.sign(cosignature_message(checkpoint.note.text, now))
        raw = self.vkey.key_id + struct.pack(">Q", now) + signature
        return f"\u2014 {self.name} {base64.b64encode(raw).decode()}"


class Fork(Exception):
    """The log showed a checkpoint inconsistent with one this witness cosigned."""


def load_key(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - see the imports above
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415

    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise TypeError(f"{path} does not hold an Ed25519 private key")
    return key


def make_key(path: Path) -> Ed25519PrivateKey:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - see the imports above
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: PLC0415

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=False)
    path.write_bytes(pem)
    return key


def witness_once(client: httpx.Client, witness: Witness, log_key: VerifierKey, state_file: Path) -> str:
    """One round: what happened (``cosigned N``, ``nothing new``). Fork when the newest
    checkpoint is not consistent with the last one cosigned (evidence next to the state)."""
    from memwarden_client.proofs import Checkpoint, ProofError, verify_consistency  # noqa: PLC0415

    state = _load_state(state_file)
    newest = _newest_note(client)
    if newest is None:
        return "no signed-note checkpoint yet"
    checkpoint = Checkpoint.verify(newest, log_key)
    last_size, last_root = state.get("size"), base64.b64decode(state["root"]) if "root" in state else None
    if last_size is not None and last_root is not None:
        if checkpoint.size == last_size and checkpoint.root == last_root:
            return f"nothing new (size {last_size})"
        try:
            proof = _consistency(client, last_size, checkpoint.size) if checkpoint.size > last_size else []
            verify_consistency(last_size, checkpoint.size, last_root, checkpoint.root, proof)
        except ProofError as error:
            evidence = state_file.with_suffix(".fork.json")
            evidence.write_text(
                json.dumps({"cosigned": state.get("note"), "offered": newest, "why": str(error)}, indent=2)
            )
            raise Fork(
                f"checkpoint {checkpoint.size} is not consistent with cosigned {last_size}: {error}; evidence in {evidence}"
            ) from error
    line = witness.cosign(checkpoint, int(time.time()))
    answer = client.post(
        f"/v1/compliance/checkpoints/{checkpoint.size}/cosignatures", json={"cosignature": line}
    )
    if answer.status_code != 200:
        raise RuntimeError(f"the server refused the cosignature: {answer.status_code} {answer.text[:300]}")
    text = checkpoint.note.text + "\n" + "\n".join(_log_line(newest)) + "\n"
    _save_state(
        state_file,
        {"size": checkpoint.size, "root": base64.b64encode(checkpoint.root).decode(), "note": text},
    )
    return f"cosigned {checkpoint.size}"


def _load_state(state_file: Path) -> dict[str, Any]:
    """The last checkpoint cosigned; a state file that cannot be read stops the witness (it
    must never start over from nothing and so cosign whatever it is shown next)."""
    from memwarden_client.proofs import ProofError  # noqa: PLC0415 - see the imports above

    if not state_file.exists():
        return {}
    try:
        state = json.loads(state_file.read_text())
    except ValueError as error:
        raise ProofError(f"the state file {state_file} is unreadable ({error}); restore it") from error
    if not isinstance(state, dict):
        raise ProofError(f"the state file {state_file} is not a witness's state; restore it")
    return state


def _save_state(state_file: Path, state: dict[str, Any]) -> None:
    """Written whole or not at all: a crash mid-write leaves the previous state."""
    partial = state_file.with_name(state_file.name + ".partial")
    with partial.open("w") as out:
        out.write(json.dumps(state))
        out.flush()
        os.fsync(out.fileno())
    partial.replace(state_file)


def _log_line(note: str) -> list[str]:
    return note.rpartition("\n\n")[2].split("\n")[:1]


def _newest_note(client: httpx.Client) -> str | None:
    answer = client.get("/v1/compliance/checkpoints", params={"limit": 20})
    answer.raise_for_status()
    notes = [item["note"] for item in answer.json()["items"] if item.get("note")]
    return notes[0] if notes else None


def _consistency(client: httpx.Client, first: int, second: int) -> list[bytes]:
    answer = client.get("/v1/compliance/proofs/consistency", params={"from": first, "to": second})
    answer.raise_for_status()
    return [base64.b64decode(p) for p in answer.json()["proof"]]


def cmd_witness(args: argparse.Namespace) -> int:
    import httpx  # noqa: PLC0415 - see the imports above

    from memwarden.domain.settings import Settings  # noqa: PLC0415
    from memwarden_client.proofs import ProofError, VerifierKey  # noqa: PLC0415

    key_file = Path(args.key)
    if args.keygen:
        witness = Witness(args.name, make_key(key_file))
        sys.stdout.write(witness.vkey.encode() + "\n")
        return 0
    witness = Witness(args.name, load_key(key_file))
    state_file = Path(args.state) if args.state else key_file.with_suffix(".state.json")
    settings = Settings.from_env()
    api_key = args.api_key or settings.api_key
    log_vkey = args.log_key or settings.log_vkey
    if not (args.url and log_vkey and api_key):
        sys.stderr.write(
            "memwarden witness needs --url, --log-key and an auditor key (--api-key or MEMWARDEN_API_KEY)\n"
        )
        return 2
    log_key = VerifierKey.parse(log_vkey)
    headers = {"Authorization": f"Bearer {api_key}"}
    with httpx.Client(base_url=args.url, headers=headers, timeout=30) as client:
        while True:
            try:
                sys.stdout.write(witness_once(client, witness, log_key, state_file) + "\n")
            except Fork as fork:
                sys.stderr.write(f"FORK: {fork}\n")
                return FORK
            except (ProofError, httpx.HTTPError, RuntimeError, TypeError) as error:
                sys.stderr.write(f"not cosigned: {error}\n")
                if args.once:
                    return 1
            sys.stdout.flush()
            if args.once:
                return 0
            time.sleep(args.interval)


def register(sub: Any) -> None:
    witness = sub.add_parser(
        "witness", help="an independent witness: check each checkpoint's consistency, then cosign"
    )
    witness.add_argument("--url", help="the memwarden API, e.g. https://memory.example")
    witness.add_argument("--key", required=True, help="the witness's Ed25519 private key (PEM)")
    witness.add_argument("--name", default="witness.local/w1", help="the witness's name (a schema-less URL)")
    witness.add_argument(
        "--log-key", help="the log's verifier key (`memwarden proof vkey`; default: MEMWARDEN_LOG_VKEY)"
    )
    witness.add_argument("--api-key", help="an auditor key of the log (default: MEMWARDEN_API_KEY)")
    witness.add_argument("--state", help="the state file (default: beside the key)")
    witness.add_argument("--keygen", action="store_true", help="make the key file and print its verifier key")
    witness.add_argument("--once", action="store_true", help="one round, then exit")
    witness.add_argument("--interval", type=float, default=30.0, help="seconds between rounds")
    witness.set_defaults(handler=cmd_witness)
