"""The API's logging levels: the serve level for the app and Litestar, WARNING at least for
the libraries that log a line per request."""

from __future__ import annotations

import logging

import pytest

from memwarden.api.http.logs import QUIET, level_name, logging_config


@pytest.mark.parametrize(
    ("given", "expected"), [("warning", "WARNING"), ("info", "INFO"), ("trace", "DEBUG"), ("x", "WARNING")]
)
def test_a_serve_level_names_a_logging_level(given: str, expected: str) -> None:
    assert level_name(given) == expected


@pytest.mark.parametrize("level", ["debug", "info", "warning"])
def test_per_request_libraries_stay_at_warning_at_any_level(level: str) -> None:
    config = logging_config(level)
    assert config.root["level"] == level_name(level)
    assert config.loggers["litestar"]["level"] == level_name(level)
    for name in QUIET:
        assert config.loggers[name]["level"] == "WARNING"
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)
