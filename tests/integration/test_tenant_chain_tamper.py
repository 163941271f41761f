"""Tenant chains against a tampering database user: any single change to a tenant's events,
its chain links or its head row is found, naming the tenant and the tenant position of the
first bad link (the counterpart of test_chain_tamper.py's property test for the one chain).

Every example runs in ONE uncommitted transaction: the change is made, the chains are
recomputed through that transaction's cursor, and the transaction is rolled back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import msgspec
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from memwarden.bootstrap.core import Core, open_core
from memwarden.domain.ledger.chain import ANCHOR_PROBLEM
from memwarden.domain.ledger.recorder import verify_tenant_tables
from memwarden.domain.model.commands import WriteMemory
from memwarden.domain.model.events import EVENT_TYPES
from memwarden.domain.model.identity import Identity
from memwarden.domain.settings import SCHEMA
from memwarden.domain.settings import Settings as MwSettings
from tests.integration.test_chain_tamper import populate

GLOBEX = Identity("globex/ops", "agent-7", "agent")
EVENTS = SQL("{}.events").format(Identifier(SCHEMA))
LINKS = SQL("{}.tenant_chain").format(Identifier(SCHEMA))
HEADS = SQL("{}.tenant_heads").format(Identifier(SCHEMA))


@dataclass(frozen=True)
class Row:
    tenant: str
    position: int
    originator_id: UUID
    version: int
    topic: str
    state: bytes


@pytest.fixture
def built(settings: MwSettings) -> Iterator[tuple[Core, list[Row]]]:
    with open_core(msgspec.structs.replace(settings, ledger_chains="tenant")) as core:
        populate(core)
        for fact in ("Globex ships on Mondays", "Globex pages the on-call by SMS"):
            assert core.memory.write(GLOBEX, WriteMemory(content=fact)).outcome == "stored"
        with psycopg.connect(core.params.conninfo(), autocommit=True) as conn:
            rows = conn.execute(
                SQL(
                    "SELECT tenant, tenant_position, originator_id, originator_version, topic, state FROM {}"
                    " ORDER BY tenant, tenant_position"
                ).format(EVENTS)
            ).fetchall()
        yield core, [Row(r[0], r[1], r[2], r[3], r[4], bytes(r[5])) for r in rows]


Tamper = Callable[[psycopg.Cursor[Any], list[Row], Row, st.DataObject], tuple[str, int, str]]
"""One kind of change to a drawn row: returns (tenant, first bad tenant position, problem)."""


def _update_event(cur: psycopg.Cursor[Any], row: Row, column: str, value: object) -> None:
    cur.execute(
        SQL("UPDATE {} SET {} = %s WHERE tenant = %s AND tenant_position = %s").format(
            EVENTS, Identifier(column)
        ),
        (value, row.tenant, row.position),
    )


def flip_state_byte(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    state = bytearray(row.state)
    state[data.draw(st.integers(0, len(state) - 1), label="byte")] ^= data.draw(
        st.integers(1, 255), label="mask"
    )
    _update_event(cur, row, "state", bytes(state))
    return row.tenant, row.position, "hash mismatch"


def change_topic(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    _update_event(cur, row, "topic", data.draw(st.sampled_from(sorted(set(EVENT_TYPES) - {row.topic}))))
    return row.tenant, row.position, "hash mismatch"


def change_version(
    cur: psycopg.Cursor[Any], rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    taken = {r.version for r in rows if r.originator_id == row.originator_id}
    _update_event(
        cur, row, "originator_version", data.draw(st.integers(1, 2**40).filter(lambda v: v not in taken))
    )
    return row.tenant, row.position, "hash mismatch"


def delete_event(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, _data: st.DataObject
) -> tuple[str, int, str]:
    cur.execute(
        SQL("DELETE FROM {} WHERE tenant = %s AND tenant_position = %s").format(EVENTS),
        (row.tenant, row.position),
    )
    return row.tenant, row.position, "event row missing"


def renumber_event(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    _update_event(cur, row, "tenant_position", row.position + data.draw(st.integers(10_000, 10**9)))
    return row.tenant, row.position, "event row missing"


def delete_link(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, _data: st.DataObject
) -> tuple[str, int, str]:
    cur.execute(
        SQL("DELETE FROM {} WHERE tenant = %s AND position = %s").format(LINKS), (row.tenant, row.position)
    )
    return row.tenant, row.position, "chain link missing"


def change_link(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    at = data.draw(st.integers(0, 31), label="hash byte")
    cur.execute(
        SQL(
            "UPDATE {} SET hash = set_byte(hash, %s::int, get_byte(hash, %s::int) # %s::int)"
            " WHERE tenant = %s AND position = %s"
        ).format(LINKS),
        (at, at, data.draw(st.integers(1, 255), label="mask"), row.tenant, row.position),
    )
    return row.tenant, row.position, "hash mismatch"


def truncate_tail(
    cur: psycopg.Cursor[Any], _rows: list[Row], row: Row, _data: st.DataObject
) -> tuple[str, int, str]:
    """The tenant's newest events and their links removed, consistently: its head row, which
    the chain must reach, still names the last position."""
    where = SQL(" WHERE tenant = %s AND {} >= %s")
    cur.execute(
        SQL("DELETE FROM {}").format(EVENTS) + where.format(Identifier("tenant_position")),
        (row.tenant, row.position),
    )
    cur.execute(
        SQL("DELETE FROM {}").format(LINKS) + where.format(Identifier("position")), (row.tenant, row.position)
    )
    return row.tenant, row.position, ANCHOR_PROBLEM


def change_head(
    cur: psycopg.Cursor[Any], rows: list[Row], row: Row, data: st.DataObject
) -> tuple[str, int, str]:
    last = max(r.position for r in rows if r.tenant == row.tenant)
    forged = data.draw(st.binary(min_size=32, max_size=32), label="forged head")
    cur.execute(SQL("UPDATE {} SET hash = %s WHERE tenant = %s").format(HEADS), (forged, row.tenant))
    return row.tenant, last, ANCHOR_PROBLEM


TAMPERS: dict[str, Tamper] = {
    "flip_state_byte": flip_state_byte,
    "change_topic": change_topic,
    "change_version": change_version,
    "delete_event": delete_event,
    "renumber_event": renumber_event,
    "delete_link": delete_link,
    "change_link": change_link,
    "truncate_tail": truncate_tail,
    "change_head": change_head,
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(tuple(TAMPERS)), data=st.data())
@pytest.mark.slow
def test_any_single_change_to_a_tenant_chain_names_its_tenant_and_position(
    built: tuple[Core, list[Row]], kind: str, data: st.DataObject
) -> None:
    core, rows = built
    assert {r.tenant for r in rows} == {"acme", "globex"}
    untouched = core.ledger.verify()
    assert untouched.ok, untouched
    row = data.draw(st.sampled_from(rows), label="row")
    with psycopg.connect(core.params.conninfo()) as conn:
        try:
            with conn.cursor() as cur:
                tenant, position, problem = TAMPERS[kind](cur, rows, row, data)
                report = core.ledger.recorder.verify_chain(cursor=cur)
                tenants = verify_tenant_tables(cur, SCHEMA)
        finally:
            conn.rollback()
    assert not report.ok, (kind, row)
    assert (report.first_bad_tenant, report.first_bad_tenant_position) == (tenant, position), (kind, report)
    assert tenants.problem is not None
    assert tenants.problem.startswith(problem), (kind, tenants)
    assert report.problem is not None
    if report.first_bad_position is None:  # the global chain holds: the problem is the tenant's
        assert report.problem == f"tenant {tenant!r} chain, tenant position {position}: {tenants.problem}"
