"""Transparency proofs (compliance roles): RFC 6962 inclusion of any ledger position in the
tree of any size, and consistency between two sizes, each O(log n) hashes (base64), checked
offline with ``memwarden_client.proofs``."""

from __future__ import annotations

import base64
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request
from litestar.params import Parameter

from memwarden.api.http.gate import Call, api_state, query
from memwarden.api.http.routes.compliance import compliance
from memwarden.api.http.routing import syscall_get

Req = Request[Any, Any, Any]
Size = Annotated[
    int, Parameter(ge=1, le=2**62, description="a tree size: the number of ledger events it covers")
]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


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
        position: Annotated[int, Parameter(ge=1, le=2**62, description="the ledger position to prove")],
        size: Size,
    ) -> InclusionResponse:
        tree = api_state(request).reads.tree

        def run(_c: Call) -> InclusionResponse:
            found = tree.inclusion(position, size)
            return InclusionResponse(
                position=found.position,
                leaf_index=found.leaf_index,
                size=found.size,
                leaf_hash=_b64(found.leaf_hash),
                root=_b64(found.root),
                proof=[_b64(p) for p in found.proof],
            )

        return query(request, run, lambda r: f"position {r.position} in {r.size}")

    @syscall_get("/consistency", compliance("compliance.proofs.consistency", query=frozenset({"from", "to"})))
    def consistency(
        self,
        request: Req,
        first: Annotated[int, Parameter(query="from", ge=1, le=2**62, description="the earlier tree size")],
        second: Annotated[int, Parameter(query="to", ge=1, le=2**62, description="the later tree size")],
    ) -> ConsistencyResponse:
        tree = api_state(request).reads.tree

        def run(_c: Call) -> ConsistencyResponse:
            found = tree.consistency(first, second)
            return ConsistencyResponse(
                first=found.first,
                second=found.second,
                first_root=_b64(found.first_root),
                second_root=_b64(found.second_root),
                proof=[_b64(p) for p in found.proof],
            )

        return query(request, run, lambda r: f"{r.first} to {r.second}")
