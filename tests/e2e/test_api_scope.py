"""The namespace boundary through every read route: a caller sees exactly its own
namespace and its ancestors (plus shares) — never siblings, descendants or look-alikes."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.api_helpers import Api

SEGMENT = st.sampled_from(
    ["acme", "eng", "engineering", "a_b", "a%b", "a\\b", "ab", "x", "x_", "%", "_", "\\"]
)


def _plant(api: Api, namespace: str, tag: str) -> tuple[str, str]:
    key = api.key(namespace, f"writer-{abs(hash(namespace)) % 10**8}", "member")
    response = api.mem(key, "write", {"content": f"Planted fact {tag} lives in namespace {namespace}"})
    assert response.status_code == 200, response.text
    return key, response.json()["id"]


def _visible_via_reads(api: Api, key: str, memory_id: str) -> bool:
    """read, history and search agree on what the key may see."""
    read = api.mem(key, "read", {"id": memory_id})
    history = api.mem(key, "history", {"id": memory_id})
    assert read.status_code in {200, 404}, read.text
    assert (read.status_code == 200) == (history.status_code == 200)
    if read.status_code == 404:
        assert read.json()["error"] == "not_found"
    found = api.mem(key, "search", {"query": "planted fact lives in namespace", "k": 100})
    assert found.status_code == 200, found.text
    assert (memory_id in {r["id"] for r in found.json()["results"]}) == (read.status_code == 200)
    return read.status_code == 200


def _ancestors(namespace: str) -> set[str]:
    parts = namespace.split("/")
    return {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}


def test_look_alikes_siblings_and_descendants_are_invisible(api: Api) -> None:
    names = [
        "acme",
        "acme/eng",
        "acme/engineering",
        "acme/eng/platform",
        "acme/sales",
        "acme/a_b",
        "acme/axb",
        "acme/a%b",
        "acme/a%bc",
        "acme/a\\b",
        "acme/a\\\\b",
        "acme/_",
        "acme/%",
    ]
    planted = {ns: _plant(api, ns, str(i)) for i, ns in enumerate(names)}
    api.settle()
    for reader in names:
        key = planted[reader][0]
        for owner in names:
            visible = _visible_via_reads(api, key, planted[owner][1])
            assert visible == (owner in _ancestors(reader)), (reader, owner)


def test_stats_and_audit_are_scoped(api: Api) -> None:
    names = ["acme/eng", "acme/engineering", "acme/eng/platform", "acme/a_b", "acme/axb"]
    planted = {ns: _plant(api, ns, str(i)) for i, ns in enumerate(names)}
    api.settle()
    stats = api.mem(planted["acme/eng"][0], "stats").json()
    assert stats["current"] == 1  # not acme/engineering, not the descendant
    auditor = api.key("acme/a_b", "audrey", "auditor")
    records = api.call(auditor, "/v1/compliance/audit", method="GET").json()["items"]
    assert records, "control: the auditor sees its own subtree's records"
    assert {r["namespace"] for r in records} == {"acme/a_b"}  # never acme/axb: `_` is escaped
    eng_auditor = api.key("acme/eng", "audrey", "auditor")
    namespaces = {
        r["namespace"] for r in api.call(eng_auditor, "/v1/compliance/audit", method="GET").json()["items"]
    }
    assert namespaces == {"acme/eng", "acme/eng/platform"}


def test_shares_extend_the_scope_of_the_target_only(api: Api) -> None:
    writer, memory_id = _plant(api, "acme/eng", "shared")
    admin = api.key("acme/eng", "boss", "admin")
    sales = api.key("acme/sales", "s", "agent")
    sales_team = api.key("acme/sales/emea", "s2", "agent")
    support = api.key("acme/support", "t", "agent")
    assert not _visible_via_reads(api, sales, memory_id)
    shared = api.mem(admin, "share", {"id": memory_id, "with": "acme/sales"})
    assert shared.status_code == 200, shared.text
    assert "share_id" in shared.json()
    api.settle()  # the share was written with another key: no read-your-writes for sales
    assert _visible_via_reads(api, sales, memory_id)
    assert _visible_via_reads(api, sales_team, memory_id)  # acme/sales is its ancestor
    assert not _visible_via_reads(api, support, memory_id)
    assert api.mem(sales, "stats").json()["shared_in"] == 1
    assert api.mem(admin, "share", {"id": memory_id, "with": "globex/sales"}).status_code == 403
    assert (
        api.mem(admin, "share", {"id": memory_id, "with": "acme/eng/platform"}).status_code == 400
    )  # sees it already
    other_admin = api.key("acme/sales", "sa", "admin")
    assert api.mem(other_admin, "share", {"id": memory_id, "with": "acme/support"}).status_code == 404
    agent = api.key("acme/eng", "bot", "agent")
    assert api.mem(agent, "share", {"id": memory_id, "with": "acme/support"}).status_code == 403
    del writer


namespace_trees = st.lists(
    st.lists(SEGMENT, min_size=1, max_size=3).map(lambda parts: "/".join(["t", *parts])),
    min_size=2,
    max_size=6,
    unique=True,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=namespace_trees)
@pytest.mark.slow
def test_every_read_route_sees_exactly_own_namespace_and_ancestors(api: Api, tree: list[str]) -> None:
    run = next(_runs)
    names = sorted(
        {a.replace("t/", f"t{run}/", 1) if a.startswith("t/") else a for ns in tree for a in _ancestors(ns)}
        - {"t"}
    )
    names = sorted({f"t{run}", *names})
    planted = {ns: _plant(api, ns, f"{run}-{i}") for i, ns in enumerate(names)}
    api.settle()
    for reader in names:
        key = planted[reader][0]
        expected = _ancestors(reader)
        seen = {owner for owner in names if _visible_via_reads(api, key, planted[owner][1])}
        assert reader in seen, "control: a caller always sees its own fact"
        assert seen == expected, (reader, seen, expected)
        stats: dict[str, Any] = api.mem(key, "stats").json()
        assert stats["current"] == len(expected)


_runs = itertools.count()
