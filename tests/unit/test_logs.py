"""The API's logging levels: the serve level for the app and Litestar, WARNING at least for
the libraries that log a line per request; JSON logs one setting away; an optional REDIS_URL."""

from __future__ import annotations

import json
import logging

import pytest

from memwarden.api.http.logs import QUIET, level_name, logging_config
from memwarden.domain.settings import Settings
from memwarden.workers.logs import formatter, redact


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


def test_json_logs_are_one_setting_away() -> None:
    """``MEMWARDEN_LOG_FORMAT=json``: the API's records and a worker's pass lines are one
    JSON object per line, the pass's fields as keys."""
    assert Settings.from_env({}).log_format == "text"
    chosen = Settings.from_env({"MEMWARDEN_LOG_FORMAT": "JSON"})
    assert chosen.log_format == "json"
    with pytest.raises(ValueError, match="MEMWARDEN_LOG_FORMAT"):
        Settings.from_env({"MEMWARDEN_LOG_FORMAT": "xml"})
    assert logging_config("info", "json").formatters["standard"] == {
        "()": "memwarden.workers.logs.JsonFormatter"
    }
    record = logging.LogRecord(
        "memwarden.passes", logging.INFO, __file__, 1, "%s pass %s", ("consolidation", "done"), None
    )
    record.fields = {"pass": "consolidation", "namespace": "acme/eng", "position": 42, "result": "done"}
    line = formatter("json").format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "consolidation pass done"
    assert {k: parsed[k] for k in ("pass", "namespace", "position", "result")} == record.fields
    text = formatter("text").format(record)
    assert "pass=consolidation namespace=acme/eng position=42 result=done" in text


def test_redis_url_is_optional_and_never_a_default_address() -> None:
    """No ``REDIS_URL``: no Redis at all (``serve`` runs the passes itself), never
    127.0.0.1:6379, where another program's Redis may answer."""
    unset = Settings.from_env({})
    assert unset.redis_url is None
    assert not unset.passes_on_redis
    assert Settings.from_env({"REDIS_URL": " "}).redis_url is None
    given = Settings.from_env({"REDIS_URL": "redis://cache:6380/2"})
    assert given.redis_url == "redis://cache:6380/2"
    assert given.passes_on_redis
    assert (unset.tickets, given.tickets) == ("thread", "queue")  # the workers run them with Redis
    chosen = Settings.from_env({"REDIS_URL": "redis://cache:6380/2", "MEMWARDEN_TICKETS": "thread"})
    assert chosen.tickets == "thread"
    for needs in ({"MEMWARDEN_SHARED_STATE": "redis"}, {"MEMWARDEN_TICKETS": "queue"}):
        with pytest.raises(ValueError, match="REDIS_URL"):
            Settings.from_env(needs)
    assert Settings.from_env({}).worker_stale_seconds == 60.0
    assert Settings.from_env({"MEMWARDEN_WORKER_STALE_SECONDS": "15"}).worker_stale_seconds == 15.0
    assert redact("redis://:s3cret@cache:6379/0") == "redis://***@cache:6379/0"
    assert redact("redis://user:s3cret@cache:6379/0") == "redis://user:***@cache:6379/0"
