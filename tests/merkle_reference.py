"""A naive RFC 6962 tree and the ledger's leaves read straight from the events table: the
reference the stored tree and its proofs are checked against."""

from __future__ import annotations

import hashlib
from typing import Any

from memwarden.projections.merkle.records import record_of
from memwarden_client.proofs import leaf_hash


def naive_root(leaves: list[bytes]) -> bytes:
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + naive_root(leaves[:k]) + naive_root(leaves[k:])).digest()


def row_leaf(row: dict[str, Any]) -> bytes:
    """The leaf of one events-table row: its canonical record, hashed as RFC 6962 does."""
    return leaf_hash(record_of(row))
