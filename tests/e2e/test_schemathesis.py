"""Schemathesis against the served OpenAPI document, for every route and three callers.

The document is the one the app serves at ``/schema/openapi.json``. Schemathesis draws
valid and invalid requests for each operation; they go to the real app in-process
(Litestar's TestClient, lifespan included, on a database of its own) with an owner key,
an agent key, or no key. Every response must be documented: its status, content type,
headers and body (errors included), and nothing answers 5xx but a documented 503.
Findings are collected for the whole run (no shrinking, bounded examples), so one
report lists each failing request with a reproduction and counts the failures by kind.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import CheckFunction
from schemathesis.core.failures import FailureGroup, ServerError
from schemathesis.schemas import APIOperation, BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from memwarden.api.http.state import STATE_KEY
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.policies import MAX_RATE_LIMIT_PER_MINUTE, PolicyBody
from tests.e2e.api_helpers import Api

EXAMPLES_PER_OPERATION = 20
"""Per operation, caller and generation mode (valid and invalid data): 35 operations x 4
callers x 2 modes x at most 20 keeps the run under a minute."""
TENANT = "fuzz"
CALLERS = {
    "owner": (TENANT, "owner"),
    "admin": (f"{TENANT}/eng", "admin"),
    "agent": (f"{TENANT}/eng/agents", "agent"),
    "anonymous": None,
}


def undocumented_server_error(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """A 5xx is a failure unless it is a 503 the operation documents (``projection_lag``,
    ``unavailable``): schemathesis's own ``not_a_server_error`` refuses every 5xx."""
    documented = str(response.status_code) in case.operation.definition.raw.get("responses", {})
    if response.status_code >= 500 and not (response.status_code == 503 and documented):
        raise ServerError(
            operation=case.operation.label,
            status_code=response.status_code,
            title="Server error",
            message=f"answered {response.status_code}: {response.text[:200]}",
        )
    return None


CHECKS: list[CheckFunction] = [
    undocumented_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@dataclass
class Finding:
    caller: str
    operation: str
    kinds: tuple[str, ...]
    request: str
    status: int
    body: str
    why: str

    def __str__(self) -> str:
        return (
            f"[{self.caller}] {self.operation} -> {self.status} {self.kinds}\n"
            f"  {self.request}\n  {self.body}\n  {self.why}"
        )


@dataclass
class Report:
    examples: int = 0
    operations: set[str] = field(default_factory=set)
    findings: list[Finding] = field(default_factory=list)
    nothing_invalid: list[str] = field(default_factory=list)
    queried: dict[str, set[str]] = field(default_factory=dict)
    """Per operation, the query parameters its cases were sent with."""

    def kinds(self) -> Counter[str]:
        return Counter(kind for finding in self.findings for kind in finding.kinds)

    def summary(self) -> str:
        first_per_kind: dict[tuple[str, tuple[str, ...]], Finding] = {}
        for finding in self.findings:
            first_per_kind.setdefault((finding.operation, finding.kinds), finding)
        lines = [
            f"{self.examples} examples, {len(self.operations)} operations, "
            f"{len(self.findings)} failing examples: {dict(self.kinds())}; "
            f"no invalid input exists for {self.nothing_invalid}",
            *(str(f) for f in first_per_kind.values()),
        ]
        return "\n".join(lines)


@pytest.fixture(autouse=True)
def hash_embedder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's meaning is not what is fuzzed; the hash embedder keeps writes fast."""
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")


@pytest.fixture
def openapi(api: Api) -> BaseSchema:
    """The document exactly as the app serves it."""
    served = api.client.get("/schema/openapi.json")
    assert served.status_code == 200
    schema = schemathesis.openapi.from_dict(served.json())
    # the bearer scheme's header is the caller's (``send`` sets each caller's key, or none):
    # a drawn Authorization would only be replaced, and a case "without it" still sent with it
    schema.config.generation.update(with_security_parameters=False)
    return schema


def unlimited(api: Api) -> None:
    """No rate limit for the tenant: a 429 on every later call would hide what is fuzzed."""
    owner = Identity(TENANT, "operator@test", "owner")
    body = PolicyBody(rate_limit_per_minute=MAX_RATE_LIMIT_PER_MINUTE)
    api.runtime.core.governance.set_policy(owner, TENANT, body)
    api.client.app.state[STATE_KEY].anonymous_audits_per_minute = MAX_RATE_LIMIT_PER_MINUTE


def send(api: Api, case: Case, key: str | None) -> Any:
    """The case as Litestar's TestClient sends it (httpx), with the caller's key or none."""
    kwargs = case.as_transport_kwargs(base_url=str(api.client.base_url))
    headers = {k: v for k, v in (kwargs.get("headers") or {}).items() if k.lower() != "authorization"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    payload: dict[str, Any] = {}
    if "json" in kwargs:
        payload["content"] = json.dumps(kwargs["json"]).encode()
        headers.setdefault("Content-Type", "application/json")
    elif kwargs.get("data") is not None:
        data = kwargs["data"]
        payload["content"] = data if isinstance(data, bytes) else str(data).encode()
    return api.client.request(
        kwargs["method"], kwargs["url"], headers=headers, params=kwargs.get("params"), **payload
    )


def draw(operation: APIOperation, mode: GenerationMode) -> list[Case]:
    """The cases hypothesis draws for the operation in this mode (derandomized, no shrinking)."""
    cases: list[Case] = []

    @hypothesis.settings(
        max_examples=EXAMPLES_PER_OPERATION,
        phases=[Phase.explicit, Phase.generate],
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def one(case: Case) -> None:
        cases.append(case)

    one()
    return cases


DRAWN: dict[tuple[str, GenerationMode], list[Case] | None] = {}
"""The cases of each operation and mode, drawn once per process: the draws are derandomized and
do not depend on the answers, so every caller is sent the same cases, and drawing them is most
of a run's time. The callers' tests share one xdist group, so one worker draws them once."""


def drawn(operation: APIOperation, mode: GenerationMode) -> list[Case] | None:
    """The operation's cases in this mode; None when no case of the mode exists."""
    key = (operation.label, mode)
    if key not in DRAWN:
        try:
            DRAWN[key] = draw(operation, mode)
        except hypothesis.errors.Unsatisfiable:
            DRAWN[key] = None
    return DRAWN[key]


def fuzz(api: Api, schema: BaseSchema, caller: str, key: str | None, seed: Seed) -> Report:
    report = Report()

    def run(case: Case) -> None:
        report.examples += 1
        report.operations.add(case.operation.label)
        report.queried.setdefault(case.operation.label, set()).update(case.query or {})
        response = send(api, case, key)
        try:
            case.validate_response(response, checks=CHECKS, headers=dict(response.request.headers))
        except FailureGroup as group:
            report.findings.append(finding(caller, case, response, group))

    for case in seeded_cases(schema, seed):
        run(case)
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in modes(operation):
            cases = drawn(operation, mode)
            if cases is None:
                assert mode is GenerationMode.NEGATIVE, f"no valid request for {operation.label}"
                report.nothing_invalid.append(operation.label)  # e.g. a free-form path segment
                continue
            for case in cases:
                run(case)
    return report


def modes(operation: APIOperation) -> list[GenerationMode]:
    """Valid data for every operation; invalid data for those that take any input."""
    raw = operation.definition.raw
    takes_input = bool(raw.get("parameters") or raw.get("requestBody"))
    return [GenerationMode.POSITIVE, GenerationMode.NEGATIVE] if takes_input else [GenerationMode.POSITIVE]


def finding(caller: str, case: Case, response: Any, group: FailureGroup) -> Finding:
    kinds = tuple(sorted({f"{type(e).__name__}:{getattr(e, 'title', '')}" for e in group.exceptions}))
    request = response.request
    sent = request.content.decode(errors="replace")[:300]
    return Finding(
        caller=caller,
        operation=case.operation.label,
        kinds=kinds,
        request=f"{request.method} {request.url} {sent}",
        status=response.status_code,
        body=response.text[:300],
        why=" | ".join(sorted({" ".join(e.message.split())[:400] for e in group.exceptions})),
    )


@pytest.fixture
def keys(api: Api) -> dict[str, str | None]:
    unlimited(api)
    return {
        # the agent ingests documents (the seed's slot is corrected by a document it writes)
        name: api.key(who[0], f"fuzz-{name}", who[1], "document" if who[1] == "agent" else None)
        if who is not None
        else None
        for name, who in CALLERS.items()
    }


@dataclass
class Seed:
    """Real things for the fuzzer to hit: random ids only ever find the 404 paths."""

    memories: list[str]
    dispute: str
    ticket: str
    certificate: dict[str, Any]


def slot_write(content: str, value: str, source: str) -> dict[str, Any]:
    return {
        "content": content,
        "subject": "deploy",
        "attribute": "window",
        "value": value,
        "provenance": {"source": source},
    }


@pytest.fixture
def seed(api: Api, keys: dict[str, str | None]) -> Seed:
    """An org fact, a slot corrected by a better source, a dispute, a ticket and an erasure."""
    agent, owner = keys["agent"], keys["owner"]
    results = [
        api.mem(owner, "write", {"content": "Release notes are written in English", "tags": ["docs"]}),
        api.mem(agent, "write", slot_write("Deploys happen on Tuesday", "tuesday", "conversation")),
        api.mem(agent, "write", slot_write("Deploys happen on Thursday", "thursday", "document")),
        api.mem(agent, "write", slot_write("Deploys happen on Friday", "friday", "conversation")),
        api.mem(owner, "write", {"content": "The fuzz tenant has no secrets worth keeping"}),
    ]
    assert [r.status_code for r in results] == [200] * 5
    bodies = [r.json() for r in results]
    assert [b["outcome"] for b in bodies] == ["stored", "stored", "superseded", "disputed", "stored"]
    ticket = api.mem(agent, "write", {"content": "Rollbacks take ten minutes", "async": True})
    forgotten = api.mem(owner, "forget", {"ids": [bodies[-1]["id"]], "reason": "fuzz seed"})
    assert ticket.status_code == 202
    assert forgotten.status_code == 200
    return Seed(
        memories=[b["id"] for b in bodies],
        dispute=bodies[3]["dispute_id"],
        ticket=ticket.json()["ticket"],
        certificate=forgotten.json()["certificate"],
    )


def seeded_cases(schema: BaseSchema, seed: Seed) -> list[Case]:
    """One valid request per operation that names the seeded things."""
    by_id = [("POST", f"/v1/mem/{name}") for name in ("read", "history", "pin", "unpin")]
    cases = [schema[path][method].Case(body={"id": m}) for method, path in by_id for m in seed.memories]
    post = [
        ("/v1/mem/verify", {"id": seed.memories[0], "supports": True}),
        ("/v1/mem/share", {"id": seed.memories[0], "with": f"{TENANT}/eng"}),
        ("/v1/mem/search", {"query": "deploys happen", "include_retired": True}),
        ("/v1/mem/write_status", {"ticket": seed.ticket}),
        ("/v1/mem/assemble", {"budget_tokens": 500, "task_hint": "deploys"}),
        ("/v1/mem/fault", {"question": "when do deploys happen"}),
        ("/v1/compliance/asof", {"as_of": "2100-01-01T00:00:00Z", "query": "deploys"}),
        ("/v1/compliance/certificates/verify", seed.certificate),
        ("/v1/compliance/ledger/verify", {}),
        ("/v1/mem/forget", {"subject": "nobody", "reason": "fuzz"}),
    ]
    cases += [schema[path]["POST"].Case(body=body) for path, body in post]
    resolve = schema["/v1/admin/disputes/{dispute_id}/resolve"]["POST"]
    cases.append(resolve.Case(path_parameters={"dispute_id": seed.dispute}, body={"decision": "both_valid"}))
    certificate = schema["/v1/compliance/certificates/{certificate_id}"]["GET"]
    cases.append(certificate.Case(path_parameters={"certificate_id": seed.certificate["id"]}))
    policies = schema["/v1/admin/policies/{namespace}"]["GET"]
    cases.append(policies.Case(path_parameters={"namespace": TENANT}))
    lists = ("/v1/admin/keys", "/v1/admin/disputes", "/v1/compliance/audit", "/v1/ops/projections")
    cases += [schema[path]["GET"].Case() for path in lists]
    return cases


@pytest.mark.slow
@pytest.mark.xdist_group("schemathesis")
@pytest.mark.parametrize("caller", list(CALLERS))
def test_every_route_answers_as_documented(
    api: Api, openapi: BaseSchema, keys: dict[str, str | None], seed: Seed, caller: str
) -> None:
    report = fuzz(api, openapi, caller, keys[caller], seed)
    print(report.summary())
    assert len(report.operations) == len(list(openapi.get_all_operations()))
    assert not report.findings, report.summary()
    for result in openapi.get_all_operations():  # every typed query parameter is exercised
        operation = result.ok()
        declared = {
            p["name"] for p in operation.definition.raw.get("parameters", []) if p.get("in") == "query"
        }
        assert declared <= report.queried.get(operation.label, set()), (operation.label, declared)


def test_the_checks_can_fail(api: Api, openapi: BaseSchema) -> None:
    """A 500, an undocumented status and an undocumented body are each found."""
    case = openapi["/healthz"]["GET"].Case()
    served = Response.from_any(api.client.get("/healthz"))
    case.validate_response(served, checks=CHECKS)
    for status, body in ((500, served.content), (418, served.content), (200, b'{"status": 1}')):
        changed = Response(
            status_code=status,
            headers=served.headers,
            content=body,
            request=served.request,
            elapsed=served.elapsed,
            verify=served.verify,
        )
        with pytest.raises(FailureGroup):
            case.validate_response(changed, checks=CHECKS)


def nested(depth: int) -> Any:
    body: Any = "x"
    for _ in range(depth):
        body = [body]
    return body


POISON = {
    "NUL in content": {"content": "nul \u0000 here"},
    "lone surrogate in content": {"content": "half \ud800 a pair"},
    "lone surrogate in a tag": {"content": "Tagged fact for the fuzz tenant", "tags": ["\udfff"]},
    "NUL as a field name": {"content": "Deploys need two approvals", "\u0000": 1},
    "JSON nested 700 deep": {"content": "Deploys need two approvals", "tags": nested(700)},
    "valid_from in year 0 (UTC)": {
        "content": "Deploys need approval",
        "valid_from": "0001-01-01T00:00:00+01:00",
    },
    "event_time in year 10000 (UTC)": {
        "content": "Deploys need approval",
        "event_time": "9999-12-31T23:59:59-01:00",
    },
}
"""Bodies of issue 12 that once broke a deployment: each is a documented 400, never stored."""


@pytest.mark.parametrize("name", list(POISON))
def test_poison_bodies_are_refused_as_documented(
    api: Api, openapi: BaseSchema, keys: dict[str, str | None], name: str
) -> None:
    case = openapi["/v1/mem/write"]["POST"].Case(body=POISON[name])
    response = send(api, case, keys["agent"])
    case.validate_response(response, checks=CHECKS)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert api.client.get("/readyz").status_code == 200
