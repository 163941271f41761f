"""The hash chain: h_n = sha256(h_{n-1} || canonical(record_n)), h_0 = 32 zero bytes.

``canonical`` is a length-prefixed binary form of the stored row, computed the same way
by the append function in PostgreSQL (see recorder.py) and by ``verify_chain`` here.

With a chain per tenant (``MEMWARDEN_LEDGER_CHAINS=tenant``) each tenant's events are also
chained among themselves by the same formula over their tenant positions, from the
tenant's own genesis ``sha256('memwarden chain' || tenant)``, so one tenant's chain cannot
be passed off as another's.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from itertools import groupby
from typing import Any
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Identifier

GENESIS = bytes(32)


class ChainReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    checked: int
    head_position: int
    head_hash: str
    first_bad_position: int | None = None
    problem: str | None = None
    tenant_chains: int = 0
    """How many tenant chains were verified (0: every event is on the single chain only)."""
    tenant_events: int = 0
    first_bad_tenant: str | None = None
    """The tenant whose chain is broken, and the tenant position of its first bad link."""
    first_bad_tenant_position: int | None = None


class TenantChainReport(msgspec.Struct, frozen=True, kw_only=True):
    ok: bool
    tenants: int
    checked: int
    first_bad_tenant: str | None = None
    first_bad_position: int | None = None
    problem: str | None = None


def tenant_genesis(tenant: str) -> bytes:
    return hashlib.sha256(b"memwarden chain" + tenant.encode()).digest()


_HEAD = struct.Struct(">q16sqi")
"""position, stream id, version, length of the topic (then the topic, the state's length, the state)."""
_LENGTH = struct.Struct(">i")


def canonical(position: int, originator_id: UUID, version: int, topic: str, state: bytes) -> bytes:
    topic_bytes = topic.encode()
    return b"".join(
        (
            _HEAD.pack(position, originator_id.bytes, version, len(topic_bytes)),
            topic_bytes,
            _LENGTH.pack(len(state)),
            state,
        )
    )


def link(previous: bytes, record: bytes) -> bytes:
    return hashlib.sha256(previous + record).digest()


ANCHOR_PROBLEM = "the ledger does not reach the checkpoint's head with its hash"


def verify_rows(
    rows: Iterable[tuple[Any, ...]],
    stop_at: int | None = None,
    anchor: tuple[int, str] | None = None,
    genesis: bytes = GENESIS,
) -> ChainReport:
    """Check rows of (event position, id, version, topic, state, chain position, chain hash).

    Rows come from a full outer join of events and chain ordered by position, so a row
    missing on either side shows up as nulls on that side. ``anchor`` is a checkpoint's
    (position, hex hash): the recomputed chain must pass through it, in the same pass.
    """
    previous = genesis
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


def verify_tenant_rows(
    rows: Iterable[tuple[Any, ...]], heads: Mapping[str, tuple[int, bytes]]
) -> TenantChainReport:
    """Check every tenant chain: rows of (tenant, tenant position, id, version, topic, state,
    chain position, chain hash), ordered by tenant and position (a full outer join of the
    tenants' events and ``tenant_chain``). Each chain starts from its tenant's genesis and
    must pass through its head row (``heads``: position, hash), so a truncated chain fails."""
    checked = tenants = 0
    seen: set[str] = set()
    for tenant, group in groupby(rows, key=lambda row: str(row[0])):
        seen.add(tenant)
        tenants += 1
        head = heads.get(tenant)
        if head is None:
            return _bad_tenant(tenants, checked, tenant, 1, "the tenant's head row is missing")
        report = verify_rows(
            (row[1:] for row in group), anchor=(head[0], head[1].hex()), genesis=tenant_genesis(tenant)
        )
        checked += report.checked
        if not report.ok:
            assert report.problem is not None
            return _bad_tenant(tenants, checked, tenant, report.first_bad_position, report.problem)
    for tenant, (position, _hash) in sorted(heads.items()):
        if tenant not in seen and position > 0:
            return _bad_tenant(tenants + 1, checked, tenant, 1, ANCHOR_PROBLEM)
    return TenantChainReport(ok=True, tenants=len(seen | set(heads)), checked=checked)


def _bad_tenant(
    tenants: int, checked: int, tenant: str, position: int | None, problem: str
) -> TenantChainReport:
    return TenantChainReport(
        ok=False,
        tenants=tenants,
        checked=checked,
        first_bad_tenant=tenant,
        first_bad_position=position,
        problem=problem,
    )


def chain_head(conn: Connection[Any], schema: str) -> tuple[int, bytes]:
    """The last link of the chain: (its position, its hash); (0, the genesis) if empty."""
    row = conn.execute(
        SQL("SELECT position, hash FROM {}.ledger_chain ORDER BY position DESC LIMIT 1").format(
            Identifier(schema)
        )
    ).fetchone()
    if row is None:
        return 0, bytes(32)
    return int(row["position"]), bytes(row["hash"])
