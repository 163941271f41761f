"""Transparency proofs (compliance roles): RFC 6962 inclusion of any ledger position in the
tree of any size, and consistency between two sizes, each O(log n) hashes (base64), checked
offline with ``memwarden_client.proofs``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter

from memwarden.api.http.gate import Call, query
from memwarden.api.http.routes.compliance import compliance
from memwarden.api.http.routing import syscall_get, syscall_post
from memwarden.api.http.schemas import Body
from memwarden.api.http.trees import tree_of
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.notes import b64
from memwarden.domain.model.errors import Forbidden, InvalidRequest, NotFound
from memwarden.domain.model.text import quote_text
from memwarden.domain.settings import Settings
from memwarden.projections.merkle.reads import InclusionProof
from memwarden.projections.reads import ReadModels
from memwarden_client.proofs import Checkpoint, Note, ProofError, VerifierKey, cosignature_time

Req = Request[Any, Any, Any]
Size = Annotated[
    int, QueryParameter(ge=1, le=2**62, description="a tree size: the number of ledger events it covers")
]


class InclusionResponse(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    """The ledger position proven (leaf ``leaf_index`` = position - 1)."""
    leaf_index: int
    size: int
    leaf_hash: str
    """SHA-256(0x00 ‖ the position's canonical record), base64."""
    root: str
    """The root of the tree of ``size`` leaves, base64: what a checkpoint of that size signs."""
    proof: list[str]
    """The audit path, nearest the leaf first, base64 (RFC 9162 §2.1.3)."""
    record: str = ""
    """The leaf's preimage, base64: the position's event as the ledger stores it (its canonical
    form, sealed fields as ciphertext; docs/proofs.md "What a leaf is"), so the proven leaf can
    be read and matched to a certificate, audit record or receipt (memwarden_client.records)."""


def _inclusion(found: InclusionProof) -> InclusionResponse:
    return InclusionResponse(
        position=found.position,
        leaf_index=found.leaf_index,
        size=found.size,
        leaf_hash=b64(found.leaf_hash),
        root=b64(found.root),
        proof=[b64(p) for p in found.proof],
        record=b64(found.record),
    )


class ConsistencyResponse(msgspec.Struct, frozen=True, kw_only=True):
    first: int
    second: int
    first_root: str
    second_root: str
    proof: list[str]
    """RFC 9162 §2.1.4: the tree of ``first`` leaves is a prefix of the tree of ``second``."""


class ProofsController(Controller):
    path = "/v1/compliance/proofs"

    @syscall_get(
        "/inclusion", compliance("compliance.proofs.inclusion", query=frozenset({"position", "size"}))
    )
    def inclusion(
        self,
        request: Req,
        position: Annotated[int, QueryParameter(ge=1, le=2**62, description="the ledger position to prove")],
        size: Size,
        reads: NamedDependency[ReadModels],
        ledger: NamedDependency[Ledger],
    ) -> InclusionResponse:
        def run(c: Call) -> InclusionResponse:
            return _inclusion(reads.tree.inclusion(position, size, tree_of(ledger, c.identity)))

        return query(request, run, lambda r: f"position {r.position} in {r.size}")

    @syscall_get("/consistency", compliance("compliance.proofs.consistency", query=frozenset({"from", "to"})))
    def consistency(
        self,
        request: Req,
        first: Annotated[
            int, QueryParameter(name="from", ge=1, le=2**62, description="the earlier tree size")
        ],
        second: Annotated[int, QueryParameter(name="to", ge=1, le=2**62, description="the later tree size")],
        reads: NamedDependency[ReadModels],
        ledger: NamedDependency[Ledger],
    ) -> ConsistencyResponse:
        def run(c: Call) -> ConsistencyResponse:
            found = reads.tree.consistency(first, second, tree_of(ledger, c.identity))
            return ConsistencyResponse(
                first=found.first,
                second=found.second,
                first_root=b64(found.first_root),
                second_root=b64(found.second_root),
                proof=[b64(p) for p in found.proof],
            )

        return query(request, run, lambda r: f"{r.first} to {r.second}")


class CosignatureBody(Body, frozen=True, kw_only=True):
    cosignature: str
    """One C2SP ``tlog-cosignature`` line (Ed25519, v1): ``— <witness name> base64(key id ‖
    timestamp ‖ signature)``, over the checkpoint note of this size."""


class CosignatureResponse(msgspec.Struct, frozen=True, kw_only=True):
    size: int
    witness: str
    note: str
    """The checkpoint note with every cosignature kept beside it."""


def check_cosignature(note: str, line: str, witness_keys: tuple[str, ...]) -> tuple[str, int]:
    """(witness name, POSIX time) of a cosignature line that a registered witness made over
    ``note``; InvalidRequest (or Forbidden for an unknown witness) otherwise."""
    keys = [VerifierKey.parse(vkey) for vkey in witness_keys]
    try:
        cosigned = Note.parse(note.rstrip("\n") + "\n" + line.strip() + "\n")
        signature = cosigned.signatures[-1]
        witness = next((k for k in keys if k.name == signature.name and k.key_id == signature.key_id), None)
        if witness is None:
            raise Forbidden("the cosignature is not from a witness this server knows")
        checkpoint = Checkpoint(
            origin="", size=0, root=b"", extensions=(), note=Note(text=cosigned.text, signatures=(signature,))
        )
        return witness.name, cosignature_time(checkpoint, witness)
    except ProofError as error:
        raise InvalidRequest(f"not a valid cosignature of this checkpoint: {error}") from error


class CosignaturesController(Controller):
    path = "/v1/compliance/checkpoints"

    @syscall_post("/{size:int}/cosignatures", compliance("compliance.checkpoints.cosign"))
    def cosign(
        self,
        request: Req,
        ledger: NamedDependency[Ledger],
        settings: NamedDependency[Settings],
        size: FromPath[int],
        data: JSONBody[CosignatureBody],
    ) -> CosignatureResponse:
        body = data

        def run(c: Call) -> CosignatureResponse:
            log = ledger.checkpoint_log
            kept = log.with_size(size, tree_of(ledger, c.identity))
            if kept is None or kept.checkpoint.note is None:
                raise NotFound("no signed-note checkpoint of that size")
            log_signed = _log_signed_part(kept.checkpoint.note)
            witness, at = check_cosignature(log_signed, body.cosignature, settings.witness_keys)
            when = datetime.fromtimestamp(at, UTC)
            log.cosign(kept.seq, witness, body.cosignature.strip(), when)
            again = log.with_size(size, tree_of(ledger, c.identity))
            assert again is not None
            return CosignatureResponse(size=size, witness=witness, note=again.checkpoint.note or "")

        return query(request, run, lambda r: f"size {r.size} cosigned by {quote_text(r.witness, 80)}")


def _log_signed_part(note: str) -> str:
    """The note as the log signed it: its text, the blank line and the log's own signature
    line (the first), without the witnesses' lines kept after it."""
    text, _, signatures = note.rpartition("\n\n")
    return f"{text}\n\n{signatures.split(chr(10))[0]}\n"


class ProveBody(Body, frozen=True, kw_only=True):
    position: Annotated[int, msgspec.Meta(ge=1, le=2**62)]
    """The ledger position to prove (a certificate's, an audit record's, a receipt's)."""
    size: Annotated[int, msgspec.Meta(ge=1, le=2**62)] | None = None
    """The tree size of the checkpoint to prove it against; default: the newest checkpoint."""


class ProveResponse(msgspec.Struct, frozen=True, kw_only=True):
    inclusion: InclusionResponse
    checkpoint: str
    """The signed-note checkpoint whose root the proof leads to (with any cosignatures)."""
    log_key: str
    """The log's verifier key as the server states it: check it against one you hold."""


class ProveController(Controller):
    path = "/v1/mem"

    @syscall_post("/prove", compliance("prove"))
    def prove(
        self,
        request: Req,
        reads: NamedDependency[ReadModels],
        ledger: NamedDependency[Ledger],
        data: JSONBody[ProveBody],
    ) -> ProveResponse:
        """One package an auditor checks offline: inclusion proof and signed checkpoint."""
        tree = reads.tree

        def run(c: Call) -> ProveResponse:
            own = tree_of(ledger, c.identity)
            kept = ledger.checkpoint_log.with_size(data.size, own)
            if kept is None or kept.checkpoint.size is None or kept.checkpoint.note is None:
                raise NotFound(
                    "no signed checkpoint of that size (POST /v1/compliance/ledger/checkpoint makes one)"
                )
            if data.position > kept.checkpoint.size:
                raise InvalidRequest(
                    f"position {data.position} is after the checkpoint's {kept.checkpoint.size} events"
                )
            found = tree.inclusion(data.position, kept.checkpoint.size, own)
            return ProveResponse(
                inclusion=_inclusion(found),
                checkpoint=kept.checkpoint.note,
                log_key=ledger.vkey_of(own),
            )

        return query(request, run, lambda r: f"position {r.inclusion.position} in {r.inclusion.size}")
