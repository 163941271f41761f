"""How a worker logs: one line per pass (``memwarden.passes``: pass, namespace, position,
result, duration), as text or, with ``MEMWARDEN_LOG_FORMAT=json``, as one JSON object per
line, so an operator can see what the passes do and why one did not happen."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

PASSES = logging.getLogger("memwarden.passes")
FIELDS = "fields"
"""The ``extra`` key under which a record carries its structured fields."""
QUIET = ("dramatiq", "redis", "psycopg", "eventsourcing")
"""Libraries whose INFO lines are theirs, not the operator's: WARNING and above only."""


class TextFormatter(logging.Formatter):
    """``time level logger message key=value ...``: the fields of a pass line after its message."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_time(record)} {record.levelname.lower()} {record.name}: {record.getMessage()}"
        fields = _fields(record)
        if fields:
            line += " " + " ".join(f"{k}={_text(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            body["exception"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, ensure_ascii=False)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure_logging(level: str, log_format: str) -> None:
    """The worker process's root handler on stderr, at ``level``, in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def pass_line(
    pass_name: str, namespace: str | None, position: int | None, result: str, seconds: float, **more: Any
) -> None:
    """Log one pass as one line (INFO; WARNING when it failed)."""
    fields = {
        "pass": pass_name,
        "namespace": namespace,
        "position": position,
        "result": result,
        "duration_ms": round(seconds * 1000, 1),
        **more,
    }
    level = logging.WARNING if result in ("failed", "dropped") else logging.INFO
    PASSES.log(level, "%s pass %s", pass_name, result, extra={FIELDS: fields})


def redact(url: str | None) -> str:
    """A Redis URL as a log line may show it: without its password."""
    if url is None:
        return "(unset)"
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user + ':***' if user else '***'}@{host}"


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    found = getattr(record, FIELDS, None)
    return found if isinstance(found, Mapping) else {}


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


def _text(value: Any) -> str:
    text = "-" if value is None else str(value)
    return json.dumps(text) if (" " in text or "=" in text or '"' in text or not text) else text
