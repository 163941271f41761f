"""The API reference (docs/reference.md) is generated from the OpenAPI document, and every
documented route has a summary, a description and its roles."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar.testing import TestClient

from memwarden.api.http import openapi
from memwarden.api.http.app import create_app
from memwarden.api.http.reference import REFERENCE, main, render


def test_every_route_is_described_with_its_roles() -> None:
    document = create_app().openapi_schema.to_schema()
    operations = [
        (method, path, op)
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method != "options"
    ]
    assert len(operations) > 30
    for method, path, op in operations:
        description = op.get("description", "")
        assert op.get("summary"), (method, path)
        assert len(description) > 30, (method, path)
        assert "Roles: " in description or "Public: no API key." in description, (method, path)
    write = document["paths"]["/v1/mem/write"]["post"]["description"]
    assert write.endswith("Roles: agent, member, admin, owner.")


def test_the_generated_reference_is_up_to_date() -> None:
    text = render()
    assert REFERENCE.read_text(encoding="utf-8") == text, "run: python -m api.http.reference"
    assert main(["--check"]) == 0
    for route in ("POST /v1/mem/write", "GET /v1/compliance/audit", "PUT /v1/admin/policies/{namespace}"):
        assert f"`{route}`" in text
    assert "| `budget_tokens` | integer | yes |" in text


def test_every_app_of_a_process_serves_the_document_the_first_one_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MEMWARDEN_DATA_DIR", str(tmp_path / "data"))  # never the user's own
    monkeypatch.setattr(openapi, "_DOCUMENTS", {})  # as in a fresh process
    first = create_app()
    second = create_app()
    assert second.openapi_schema is first.openapi_schema  # built once
    document = second.openapi_schema.to_schema()
    assert openapi.ERROR_SCHEMA in document["components"]["schemas"]  # rewritten before it was shared
    assert document["paths"]["/v1/mem/write"]["post"]["summary"]
    served = []
    for app in (first, second):
        with TestClient(app=app) as client:
            served.append(client.get("/schema/openapi.json").json())
    assert served[1] == served[0]
    assert (
        served[1]["paths"]["/v1/mem/write"]["post"]["summary"]
        == document["paths"]["/v1/mem/write"]["post"]["summary"]
    )
