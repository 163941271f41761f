"""The client is checked against the contract: every operation of the OpenAPI document the
app serves has a method named by its ``operationId`` on ``Client`` and ``AsyncClient``, whose
request struct (the ``operationId`` in PascalCase) names the same method and path; every list
has its ``iter_`` method; no name of the old mixed scheme lingers."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from memwarden.api.http.app import create_app
from memwarden_client import AsyncClient, Client
from memwarden_client import requests as q

METHODS = {"get", "put", "post", "delete", "patch"}


def _operations() -> list[tuple[str, str, str, dict[str, Any]]]:
    document = create_app().openapi_schema.to_schema()
    return [
        (op["operationId"], method.upper(), path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def test_every_operation_has_a_method_on_both_clients_and_a_request_struct() -> None:
    operations = _operations()
    assert len(operations) > 40
    for operation_id, method, path, _op in operations:
        for client in (Client, AsyncClient):
            assert callable(getattr(client, operation_id, None)), f"{client.__name__}.{operation_id} missing"
        request = getattr(q, _pascal(operation_id))
        assert (request.method, request.path) == (method, path), operation_id
        parameters = {p["name"] for p in _op.get("parameters", []) if p["in"] == "path"}
        assert set(request.path_params) == parameters, operation_id
        assert inspect.iscoroutinefunction(getattr(AsyncClient, operation_id)), operation_id


def test_every_list_has_an_iterator_and_a_page_type() -> None:
    lists = [op for op in _operations() if issubclass(getattr(q, _pascal(op[0])), q.PagedRequest)]
    assert {op[0] for op in lists} >= {
        "keys", "disputes", "findings", "decisions", "proposals", "audit", "checkpoints", "as_of",
    }  # fmt: skip
    for operation_id, *_rest in lists:
        assert callable(getattr(Client, f"iter_{operation_id}")), operation_id
        assert callable(getattr(AsyncClient, f"iter_{operation_id}")), operation_id


@pytest.mark.parametrize(
    "old",
    ["GetHistory", "GetStats", "GetPolicy", "AckPolicy", "ListKeys", "ListDisputes", "GetNamespacePolicy",
     "GetCertificate", "ListProjections", "AuditPage", "CheckpointPage"],
)  # fmt: skip
def test_no_name_of_the_old_scheme_lingers(old: str) -> None:
    assert not hasattr(q, old)
    assert not hasattr(q.r, old)
    assert not hasattr(Client, old)
