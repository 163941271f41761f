"""How the API process logs: at the level ``memwarden serve --log-level`` names (Settings'
``log_level``, WARNING by default) for the app's own loggers and Litestar's, and never below
WARNING for the libraries that log a line per request (httpx logs one for each call the
console bridges into the API; the MCP SDK one for each stateless request): the API's
metrics and audit records say what was called."""

from __future__ import annotations

import logging

from litestar.logging.config import LoggingConfig

QUIET = ("httpx", "httpcore", "mcp", "mcp.server", "hpack")
"""Per-request chatter: WARNING and above only, whatever the level."""
LEVELS = {
    "trace": "DEBUG",
    "debug": "DEBUG",
    "info": "INFO",
    "warning": "WARNING",
    "error": "ERROR",
    "critical": "CRITICAL",
}


def level_name(level: str) -> str:
    """A uvicorn ``--log-level`` as a ``logging`` level name (WARNING when unknown)."""
    return LEVELS.get(level.strip().lower(), "WARNING")


JSON_FORMATTER = {"()": "memwarden.workers.logs.JsonFormatter"}
"""``MEMWARDEN_LOG_FORMAT=json``: one JSON object per line, as the workers write them."""


def logging_config(level: str, log_format: str = "text") -> LoggingConfig:
    name = level_name(level)
    for quiet in QUIET:  # before Litestar configures logging, and for processes it does not
        logging.getLogger(quiet).setLevel(max(logging.WARNING, logging.getLevelName(name)))
    config = LoggingConfig(
        root={"level": name, "handlers": ["queue_listener"]},
        loggers={
            "litestar": {"level": name, "handlers": ["queue_listener"], "propagate": False},
            **{quiet: {"level": "WARNING", "propagate": True} for quiet in QUIET},
        },
        log_exceptions="never",  # api/http/errors.py logs what is unexpected, once
    )
    if log_format == "json":
        config.formatters["standard"] = dict(JSON_FORMATTER)
    return config
