"""Fixtures of the HTTP tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from litestar.testing import TestClient

from api.app import create_app
from api.runtime import Runtime
from domain.settings import Settings
from tests.e2e.api_helpers import Api


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime)) as client:
        yield Api(runtime, client)
