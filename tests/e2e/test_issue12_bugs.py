"""Regression tests of issue 12's bugs over HTTP: history of quarantined memories, as-of
over a subtree, HEAD on the health routes, Prometheus exposition, a docs page with no
outside assets, and an OpenAPI document whose error bodies are the ones the API sends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from memwarden.api.cli.main import main
from memwarden.api.http.metrics import Gauge, Metrics
from memwarden.api.http.routes import health
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.model.namespaces import is_within
from memwarden.domain.model.scopes import Subtree
from memwarden.projections.timeline.service import AsOfQuestion
from tests.conftest import url_of
from tests.e2e.api_helpers import Api
from tests.processes import METRICS_AUTH, free_port

REPO_ROOT = Path(__file__).resolve().parents[2]

MANUAL = {
    "content": "Dana lives in Oslo",
    "subject": "dana",
    "attribute": "city",
    "value": "Oslo",
    "provenance": {"source": "manual"},
}
LOWER = {"content": "Dana lives in Bergen", "subject": "dana", "attribute": "city", "value": "Bergen"}


def versions(api: Api, key: str, memory_id: str) -> list[str] | None:
    """The ids of a memory's history as ``key`` sees it, or None for a 404."""
    answer = api.mem(key, "history", {"id": memory_id})
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    return [step["id"] for step in answer.json()["versions"]]


@pytest.mark.parametrize("decision", ["uphold_new", "keep_old"])
def test_history_of_a_quarantined_memory_answers_whoever_may_see_it(api: Api, decision: str) -> None:
    member = api.key("acme/eng", "mia", "member")
    agent = api.key("acme/eng", "bot", "agent")
    reviewer = api.key("acme", "boss", "admin")
    auditor = api.key("acme", "audrey", "auditor")
    sibling = api.key("acme/sales", "sal", "admin")
    outsider = api.key("globex", "gus", "owner")
    old = api.mem(member, "write", MANUAL).json()["id"]
    new = api.mem(agent, "write", LOWER).json()
    assert new["outcome"] == "disputed"
    api.settle()

    # quarantined: invisible to reads, so to the agents' history; the reviewers see it
    assert api.mem(agent, "read", {"id": new["id"]}).status_code == 404
    assert versions(api, agent, new["id"]) is None
    assert versions(api, reviewer, new["id"]) == [new["id"]]
    assert versions(api, auditor, new["id"]) is None  # not a reviewer: quarantine holds
    assert versions(api, auditor, old) == [old]  # compliance staff look down their subtree
    for stranger in (sibling, outsider):
        assert versions(api, stranger, new["id"]) is None
        assert versions(api, stranger, old) is None

    resolved = api.call(reviewer, f"/v1/admin/disputes/{new['dispute_id']}/resolve", {"decision": decision})
    assert resolved.status_code == 200, resolved.text
    api.settle()

    assert api.mem(agent, "read", {"id": new["id"]}).status_code == 200
    for caller in (agent, member, reviewer, auditor):
        assert versions(api, caller, new["id"]) == [old, new["id"]]
        assert versions(api, caller, old) == [old, new["id"]]
    for stranger in (sibling, outsider):
        assert versions(api, stranger, new["id"]) is None
    steps = {s["id"]: s for s in api.mem(agent, "history", {"id": old}).json()["versions"]}
    settled = (old, new["id"]) if decision == "uphold_new" else (new["id"], old)
    assert steps[settled[0]]["superseded_by"] == settled[1]


def test_compliance_asof_looks_down_the_subtree_by_sql_replay_and_cli(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    placed = {
        "acme": "The company is named Acme",
        "acme/hr": "Payroll runs on the 25th",
        "acme/eng": "Deploys happen on Tuesday",
        "acme/eng/db": "The primary database is db-1",
        "acme/engineering": "The engineering wiki moved",
        "acme/e_g": "Underscore team exists",
        "acme/e%": "Percent team exists",
        "acme/q\\": "Backslash team exists",
        "acme/q\\/sub": "Backslash subteam exists",
        "globex": "Globex is a competitor",
    }
    for namespace, content in placed.items():
        key = api.key(namespace, "writer", "member")
        assert api.mem(key, "write", {"content": content}).json()["outcome"] == "stored"
    api.settle()
    auditor = api.key("acme", "audrey", "auditor")
    now = datetime.now(UTC).isoformat()

    def seen(body: dict[str, Any]) -> set[str]:
        answer = api.call(auditor, "/v1/compliance/asof", {"as_of": now, **body})
        assert answer.status_code == 200, answer.text
        return {m["namespace"] for m in answer.json()["memories"]}

    assert seen({}) == set(placed) - {"globex"}
    assert seen({"target": "acme/hr"}) == {"acme/hr"}
    assert seen({"target": "acme/eng"}) == {"acme/eng", "acme/eng/db"}  # not acme/engineering
    assert seen({"target": "acme/e_g"}) == {"acme/e_g"}  # _ and % are literal
    assert seen({"target": "acme/e%"}) == {"acme/e%"}
    assert seen({"target": "acme/q\\"}) == {"acme/q\\", "acme/q\\/sub"}  # \ is literal too
    outside = api.call(auditor, "/v1/compliance/asof", {"as_of": now, "target": "globex"})
    assert outside.status_code == 403
    assert outside.json()["error"] == "outside_subtree"
    below = api.key("acme/eng", "lead", "admin")
    assert api.call(below, "/v1/compliance/asof", {"as_of": now, "target": "acme"}).status_code == 403

    travel = api.runtime.reads.time_travel
    for root in ("acme", "acme/eng", "acme/e_g", "acme/e%", "acme/q\\"):
        check = travel.verify(AsOfQuestion(scope=Subtree(root), as_of=datetime.fromisoformat(now)))
        assert check.ok, check.differences
        assert {m.namespace for m in check.replay.memories} == {n for n in placed if is_within(n, root)}

    monkeypatch.setenv("DATABASE_URL", api.runtime.settings.database_url or "")
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(api.runtime.settings.data_dir))
    capsys.readouterr()
    assert main(["asof", now, "--namespace", "acme/eng", "--verify", "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert {m["namespace"] for m in verified["replay"]["memories"]} == {"acme/eng", "acme/eng/db"}
    assert {m["namespace"] for m in verified["sql"]["memories"]} == {"acme/eng", "acme/eng/db"}


def test_head_on_the_health_routes_answers_like_get_without_a_body(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    for path in ("/healthz", "/readyz"):
        got = api.client.get(path)
        headed = api.client.head(path)
        assert headed.status_code == got.status_code == 200, path
        assert headed.content == b""
    monkeypatch.setattr(health, "READY_MAX_LAG", -1)  # any lag is too much: not ready
    got = api.client.get("/readyz")
    headed = api.client.head("/readyz")
    assert headed.status_code == got.status_code == 503
    assert headed.headers["Retry-After"] == got.headers["Retry-After"] == "1"
    assert headed.content == b""


def test_metrics_are_valid_prometheus_exposition(api: Api) -> None:
    agent = api.key("acme/eng", "bot", "agent")
    api.mem(agent, "write", {"content": "Deploys happen on Tuesday"})
    api.mem(agent, "read", {"id": "not-a-uuid"})
    text = api.client.get("/metrics", headers=METRICS_AUTH).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["memwarden_http_requests"].type == "counter"
    assert families["memwarden_events"].type == "counter"
    assert families["memwarden_http_request_seconds"].type == "summary"
    lag = families["memwarden_projection_lag"]
    assert lag.type == "gauge"
    assert {s.labels["projection"] for s in lag.samples} >= {"memory_objects", "memory_timeline"}
    assert families["memwarden_ledger_reachable"].samples[0].value == 1
    statuses = {s.labels["status"] for s in families["memwarden_http_requests"].samples}
    assert {"200", "400"} <= statuses
    for line in text.splitlines():
        if line.startswith(("# TYPE", "# HELP")):
            assert "{" not in line.split()[2], line
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))


def test_metric_label_values_are_escaped() -> None:
    metrics = Metrics()
    odd = 'a "quoted" back\\slash\nnewline'
    metrics.observe("GET", odd, 200, 0.5)
    metrics.count(odd)
    text = metrics.render([Gauge("projection_lag", "lag", [((("projection", odd),), 3.0)])])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["memwarden_http_requests"].samples[0].labels["route"] == odd
    assert families["memwarden_events"].samples[0].labels["event"] == odd
    assert families["memwarden_projection_lag"].samples[0].labels["projection"] == odd
    assert families["memwarden_http_request_seconds"].samples[0].value == 0.5


def test_serve_prints_one_listening_line_once_it_accepts_connections(
    database: ConnectionParams, tmp_path: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url_of(database),
        "MEMWARDEN_DATA_DIR": str(tmp_path / "home"),
        "MEMWARDEN_EMBEDDER": "hash",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "memwarden.api.cli.main", "serve", "--port", str(port)],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(120, server.kill)  # a server that never says it is up fails the test
    watchdog.start()
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # blocks until the line (or the end: a failed start)
        assert line == f"memwarden listening on http://127.0.0.1:{port} (1 worker)\n"
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        watchdog.cancel()
        server.terminate()
        server.wait(timeout=30)
    assert server.stdout.read() == ""  # said once


class AssetLinks(HTMLParser):
    """Every ``src`` and ``href`` of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [value for name, value in attrs if name in {"src", "href"} and value]


def test_the_docs_page_loads_only_assets_the_app_serves(api: Api) -> None:
    page = api.client.get("/schema")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    parser = AssetLinks()
    parser.feed(page.text)
    assert any(link.endswith("swagger-ui-bundle.js") for link in parser.links)
    for link in parser.links:
        assert link.startswith("/"), link  # a path of this app: no scheme, ...
        assert not link.startswith("//"), link  # ... and no other host
        asset = api.client.get(link)
        assert asset.status_code == 200, link
        assert asset.content
    head = page.text.split("<body", 1)[0]
    assert "http://" not in head
    assert "https://" not in head
    for cdn_page in ("/schema/redoc", "/schema/rapidoc", "/schema/elements"):
        assert api.client.get(cdn_page).status_code == 404


def test_the_openapi_document_declares_the_error_bodies_the_api_sends(api: Api) -> None:
    document = api.client.get("/schema/openapi.json").json()
    error_ref = "#/components/schemas/ErrorBody"
    assert set(document["components"]["schemas"]["ErrorBody"]["required"]) == {"error", "detail"}
    statuses: dict[tuple[str, str], set[int]] = {}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            rendered = json.dumps(operation["responses"])
            assert '"status_code"' not in rendered, (path, method)
            assert '"extra"' not in rendered, (path, method)
            errors = {int(s) for s in operation["responses"] if s.startswith(("4", "5"))}
            statuses[(path, method)] = errors
            for status in errors:
                response = operation["responses"][str(status)]
                assert response["content"]["application/json"]["schema"] == {"$ref": error_ref}
                assert ("Retry-After" in (response.get("headers") or {})) == (status in {429, 503})
    gated = {400, 401, 403, 429, 503}
    assert statuses[("/v1/mem/read", "post")] == gated | {404, 413}
    assert statuses[("/v1/mem/search", "post")] == gated | {413}
    assert statuses[("/v1/mem/write", "post")] == gated | {409, 413}
    assert statuses[("/v1/admin/disputes/{dispute_id}/resolve", "post")] == gated | {404, 409, 413}
    assert statuses[("/v1/admin/keys", "get")] == gated
    assert statuses[("/readyz", "get")] == {503}
    assert statuses[("/healthz", "get")] == set()

    unauthenticated = api.mem(None, "read", {"id": "00000000-0000-4000-8000-000000000000"})
    assert unauthenticated.status_code == 401
    assert set(unauthenticated.json()) == {"error", "detail"}
    assert (
        unauthenticated.json()["error"]
        in document["components"]["schemas"]["ErrorBody"]["properties"]["error"]["enum"]
    )
