"""``verify_tenant_rows`` on chains built here (no database): untouched chains verify, and any
single change to one tenant's rows or head is found at that tenant and tenant position."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

from memwarden.domain.ledger.chain import ANCHOR_PROBLEM, canonical, link, tenant_genesis, verify_tenant_rows

Row = tuple[Any, ...]
"""(tenant, tenant position, id, version, topic, state, chain position, chain hash)."""

TENANTS = st.lists(st.text("abcdefgh/", min_size=1, max_size=6), min_size=1, max_size=3, unique=True).map(
    sorted
)
EVENT = st.tuples(
    st.uuids(),
    st.integers(1, 2**40),
    st.sampled_from(["MemoryWritten", "AuditRecorded"]),
    st.binary(max_size=24),
)


def build(
    tenants: list[str], events: dict[str, list[tuple[UUID, int, str, bytes]]]
) -> tuple[list[Row], dict[str, tuple[int, bytes]]]:
    rows: list[Row] = []
    heads: dict[str, tuple[int, bytes]] = {}
    for tenant in tenants:
        previous = tenant_genesis(tenant)
        for position, (originator_id, version, topic, state) in enumerate(events[tenant], start=1):
            previous = link(previous, canonical(position, originator_id, version, topic, state))
            rows.append((tenant, position, originator_id, version, topic, state, position, previous))
        heads[tenant] = (len(events[tenant]), previous)
    return rows, heads


@st.composite
def ledgers(draw: st.DrawFn) -> tuple[list[Row], dict[str, tuple[int, bytes]]]:
    tenants = draw(TENANTS)
    events = {t: draw(st.lists(EVENT, min_size=1, max_size=6)) for t in tenants}
    return build(tenants, events)


@settings(max_examples=200, deadline=None)
@given(ledger=ledgers())
def test_untouched_tenant_chains_verify(ledger: tuple[list[Row], dict[str, tuple[int, bytes]]]) -> None:
    rows, heads = ledger
    report = verify_tenant_rows(rows, heads)
    assert report.ok, report
    assert (report.tenants, report.checked) == (len(heads), len(rows))


@settings(max_examples=400, deadline=None)
@given(ledger=ledgers(), data=st.data())
def test_any_single_change_names_its_tenant_and_position(
    ledger: tuple[list[Row], dict[str, tuple[int, bytes]]], data: st.DataObject
) -> None:
    rows, heads = ledger
    index = data.draw(st.integers(0, len(rows) - 1), label="row")
    tenant, position = rows[index][0], rows[index][1]
    kind = data.draw(
        st.sampled_from(["state", "version", "topic", "hash", "drop_event", "drop_link", "head", "truncate"])
    )
    row = list(rows[index])
    problem = "hash mismatch"
    if kind == "state":
        row[5] = row[5] + b"x"
    elif kind == "version":
        row[3] = row[3] + data.draw(st.integers(1, 100))
    elif kind == "topic":
        row[4] = row[4] + "X"
    elif kind == "hash":
        row[7] = bytes(32) if row[7] != bytes(32) else b"\x01" * 32
    elif kind == "drop_event":
        row[1:6] = [None] * 5
        problem = "event row missing"
    elif kind == "drop_link":
        row[6:8] = [None, None]
        problem = "chain link missing"
    changed = [*rows[:index], tuple(row), *rows[index + 1 :]]
    if kind == "head":
        last = heads[tenant][0]
        heads = {**heads, tenant: (last, bytes(32))}
        position, problem = last, ANCHOR_PROBLEM
    elif kind == "truncate":
        changed = [r for r in rows if not (r[0] == tenant and r[1] >= position)]
        problem = ANCHOR_PROBLEM
    report = verify_tenant_rows(changed, heads)
    assert not report.ok, (kind, report)
    assert (report.first_bad_tenant, report.first_bad_position) == (tenant, position), (kind, report)
    assert report.problem is not None
    assert report.problem.startswith(problem), (kind, report)
