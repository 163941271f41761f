"""The hash chain: h_n = sha256(h_{n-1} || canonical(record_n)), h_0 = 32 zero bytes.

``canonical`` is a length-prefixed binary form of the stored row, computed the same way
by the append function in PostgreSQL (see recorder.py) and by ``verify_chain`` here.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Any
from uuid import UUID

import msgspec

GENESIS = bytes(32)


class ChainReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    checked: int
    head_position: int
    head_hash: str
    first_bad_position: int | None = None
    problem: str | None = None


def canonical(position: int, originator_id: UUID, version: int, topic: str, state: bytes) -> bytes:
    topic_bytes = topic.encode()
    return b"".join(
        (
            struct.pack(">q", position),
            originator_id.bytes,
            struct.pack(">q", version),
            struct.pack(">i", len(topic_bytes)),
            topic_bytes,
            struct.pack(">i", len(state)),
            state,
        )
    )


def link(previous: bytes, record: bytes) -> bytes:
    return hashlib.sha256(previous + record).digest()


ANCHOR_PROBLEM = "the ledger does not reach the checkpoint's head with its hash"


def verify_rows(
    rows: Iterable[tuple[Any, ...]], stop_at: int | None = None, anchor: tuple[int, str] | None = None
) -> ChainReport:
    """Check rows of (event position, id, version, topic, state, chain position, chain hash).

    Rows come from a full outer join of events and chain ordered by position, so a row
    missing on either side shows up as nulls on that side. ``anchor`` is a checkpoint's
    (position, hex hash): the recomputed chain must pass through it, in the same pass.
    """
    previous = GENESIS
    expected = 1
    checked = 0
    for position, originator_id, version, topic, state, chain_position, chain_hash in rows:
        at = position if position is not None else chain_position
        if stop_at is not None and at > stop_at:
            break
        problem = None
        if at != expected:
            problem = f"gap: expected position {expected}, found {at}"
            at = min(at, expected)
        elif position is None:
            problem = "event row missing"
        elif chain_position is None:
            problem = "chain link missing"
        else:
            computed = link(previous, canonical(position, originator_id, version, topic, bytes(state)))
            if computed != bytes(chain_hash):
                problem = "hash mismatch"
            elif anchor is not None and position == anchor[0] and computed.hex() != anchor[1]:
                problem = ANCHOR_PROBLEM
            previous = computed
        if problem is not None:
            return ChainReport(
                ok=False,
                checked=checked,
                head_position=expected - 1,
                head_hash=previous.hex(),
                first_bad_position=at,
                problem=problem,
            )
        checked += 1
        expected += 1
    if anchor is not None and expected - 1 < anchor[0]:
        return ChainReport(
            ok=False,
            checked=checked,
            head_position=expected - 1,
            head_hash=previous.hex(),
            first_bad_position=expected,
            problem=ANCHOR_PROBLEM,
        )
    return ChainReport(ok=True, checked=checked, head_position=expected - 1, head_hash=previous.hex())
