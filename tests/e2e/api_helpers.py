"""Shared pieces of the HTTP tests: an app on the test database, keys, audit counting."""

from __future__ import annotations

from typing import Any

from litestar.testing import TestClient

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.events import AuditRecorded
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.namespaces import tenant_of


def issue_key(
    runtime: Runtime, namespace: str, actor: str, role: str, max_provenance: str | None = None
) -> str:
    """A key for ``actor`` in ``namespace``, minted by the tenant's operator (``max_provenance``:
    the highest source it may claim; None: its role's default)."""
    operator = Identity(tenant_of(namespace), "operator@test", "owner")
    command = IssueKey(target=namespace, actor=actor, role=role, max_provenance=max_provenance)
    return runtime.core.governance.issue_key(operator, command).key


def audit_records(runtime: Runtime) -> list[AuditRecorded]:
    """Every audit record on the ledger, in order."""
    found: list[AuditRecorded] = []
    after = 0
    while True:
        batch = runtime.ledger.read(after, 1000)
        if not batch:
            return found
        found.extend(r.event for r in batch if isinstance(r.event, AuditRecorded))
        after = int(batch[-1].position or 0)


class Api:
    """A served app (Litestar's TestClient runs the real ASGI app, lifespan included)."""

    def __init__(self, runtime: Runtime, client: TestClient[Any]) -> None:
        self.runtime = runtime
        self.client = client

    def key(self, namespace: str, actor: str, role: str, max_provenance: str | None = None) -> str:
        return issue_key(self.runtime, namespace, actor, role, max_provenance)

    def call(self, key: str | None, path: str, body: Any = None, method: str = "POST", **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        if method == "POST":
            return self.client.post(path, json=body if body is not None else {}, headers=headers, **kw)
        if method == "PUT":
            return self.client.put(path, json=body if body is not None else {}, headers=headers, **kw)
        return self.client.get(path, headers=headers, **kw)

    def mem(self, key: str | None, name: str, body: Any = None, **kw: Any) -> Any:
        return self.call(key, f"/v1/mem/{name}", body, **kw)

    def settle(self) -> None:
        """Wait until the read models reflect the whole ledger (another key's writes)."""
        self.runtime.reads.wait_for(self.runtime.ledger.head_position())

    def audit_records(self) -> list[AuditRecorded]:
        return audit_records(self.runtime)
