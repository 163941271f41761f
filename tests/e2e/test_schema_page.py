"""The docs page at ``/schema`` in headless Chromium against a real ``memwarden serve``: it
renders the OpenAPI 3.1 document (every operation shown), from assets the app serves itself."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memwarden.api.http.app import create_app
from memwarden.api.http.schemas import WRITE_ITEM_FIELDS
from memwarden.domain.ledger.database import ConnectionParams
from tests.conftest import url_of
from tests.e2e.browser import NO_CHROMIUM, chromium
from tests.processes import TIMED, serving

pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

pytestmark = [NO_CHROMIUM, TIMED]
METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture
def base(database: ConnectionParams, tmp_path: Path) -> Iterator[str]:
    env = {
        **os.environ,
        "DATABASE_URL": url_of(database),
        "MEMWARDEN_DATA_DIR": str(tmp_path / "home"),
        "MEMWARDEN_EMBEDDER": "hash",
    }
    with serving(env) as (_server, url):
        yield url


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


def test_the_docs_page_shows_every_operation_of_the_document(base: str, browser: WebDriver) -> None:
    document = httpx.get(f"{base}/schema/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    operations = sum(1 for item in document["paths"].values() for method in item if method in METHODS)
    browser.get(f"{base}/schema")
    WebDriverWait(browser, 30).until(
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, ".opblock")) >= operations
            or d.find_elements(By.CSS_SELECTOR, ".errors-wrapper")
        )
    )
    assert not browser.find_elements(By.CSS_SELECTOR, ".errors-wrapper"), browser.find_element(
        By.TAG_NAME, "body"
    ).text[:500]
    assert len(browser.find_elements(By.CSS_SELECTOR, ".opblock")) == operations
    # the key can be given: the bearer scheme makes the page offer "Authorize"
    assert browser.find_elements(By.CSS_SELECTOR, ".btn.authorize")
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(function (e) { return e.name; })"
    )
    assert loaded, "the page loaded no assets"
    assert all(str(name).startswith(base) for name in loaded), loaded


def test_every_gated_operation_requires_the_bearer_key(base: str) -> None:
    document = httpx.get(f"{base}/schema/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["apiKey"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if method not in METHODS:
                continue
            public = path in {"/healthz", "/readyz", "/metrics"}
            assert ("security" in operation) != public, (method, path)
            if not public:
                assert operation["security"] == [{"apiKey": []}]


def test_a_batch_item_names_the_fields_of_a_write() -> None:
    """``write_batch``'s items are documented as write bodies: the fields named (another is a
    400 for the batch), their values left to each item's own result."""
    document = create_app().openapi_schema.to_schema()
    item = document["components"]["schemas"]["WriteBatchBody"]["properties"]["items"]["items"]
    assert item["additionalProperties"] is False
    assert set(item["properties"]) == WRITE_ITEM_FIELDS
    assert "async" not in item["properties"]
