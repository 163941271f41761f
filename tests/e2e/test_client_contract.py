"""The client is checked against the contract: every operation of the OpenAPI document the
app serves has a method named by its ``operationId`` on ``Client`` and ``AsyncClient``, whose
request struct (the ``operationId`` in PascalCase) names the same method and path; every list
has its ``iter_`` method; no name of the old mixed scheme lingers."""

from __future__ import annotations

import inspect
from typing import Any

import msgspec
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


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas an answer may be (a union's members, a list's or a page's items)."""
    if "$ref" in schema:
        return _resolve(components[schema["$ref"].rsplit("/", 1)[-1]], components)
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            return [s for member in schema[combinator] for s in _resolve(member, components)]
    if schema.get("type") == "array":
        return _resolve(schema.get("items", {}), components)
    return [schema] if "properties" in schema else []


def _page_items(page: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    """The item shapes of a page object (``items``; before API.md's "Lists", its one list)."""
    lists = [p for name, p in page["properties"].items() if p.get("type") == "array" or name == "items"]
    return [i for p in lists[:1] for i in _resolve(p, components)] if len(lists) == 1 else []


def _fields(result: Any) -> tuple[set[str], set[str]]:
    """(every field, the required ones) of a result struct; a page's are its items'."""
    origin = getattr(result, "__origin__", None)
    if origin is q.r.Page:
        return _fields(result.__args__[0])
    if not (isinstance(result, type) and issubclass(result, msgspec.Struct)):
        return set(), set()
    fields = msgspec.structs.fields(result)
    return {f.encode_name for f in fields}, {f.encode_name for f in fields if f.required}


def test_every_result_struct_reads_the_documented_answer() -> None:
    """Each client result names only fields the document's answer has, and requires only
    fields the answer always has: a renamed or dropped field fails here, not in a user's script."""
    document = create_app().openapi_schema.to_schema()
    components = document["components"]["schemas"]
    checked = 0
    for operation_id, _method, _path, op in _operations():
        request = getattr(q, _pascal(operation_id))
        fields, required = _fields(request.result)
        answer = op["responses"].get("200", {}).get("content", {}).get("application/json", {}).get("schema")
        if not fields or answer is None:
            continue
        shapes = _resolve(answer, components)
        if getattr(request.result, "__origin__", None) is q.r.Page:  # a page: its items' shape
            shapes = [i for s in shapes for i in _page_items(s, components)] or shapes
        if not shapes:
            continue
        documented = {name for s in shapes for name in s["properties"]}
        always = set.intersection(*(set(s.get("required", [])) | set(s["properties"]) for s in shapes))
        assert fields <= documented, (operation_id, sorted(fields - documented))
        assert required <= always, (operation_id, sorted(required - always))
        checked += 1
    assert checked > 30


def test_every_request_struct_takes_the_query_parameters_its_operation_declares() -> None:
    """A typed query parameter the server takes (a filter, paging) is a field of the request."""
    for operation_id, _method, _path, op in _operations():
        declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        request = getattr(q, _pascal(operation_id))
        fields = {request.__struct_encode_fields__[i] for i, _ in enumerate(request.__struct_fields__)}
        assert declared <= fields, (operation_id, declared - fields)
