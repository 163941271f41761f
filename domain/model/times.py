"""Times a caller may give: what PostgreSQL can store, and the written forms accepted.

Every timestamp is stored as UTC, so a time must still be within years 1-9999 once
converted to UTC (``0001-01-01T00:00:00+01:00`` is year 0 in UTC and cannot be stored).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_TIME_TEXT = 64


def time_problem(moment: datetime) -> str | None:
    """Why ``moment`` cannot be stored (no zone, or outside years 1-9999 in UTC), or None."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        return "has no time zone (write e.g. 2026-03-01T00:00:00Z)"
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return "is outside years 1-9999 once converted to UTC"
    return None


NOW = "now"
"""The word every way in (HTTP, MCP, CLI, client) accepts for the present instant."""


def parse_time_text(text: str, now: datetime | None = None) -> datetime:
    """``now`` (the caller's clock reading ``now``, when it gives one), RFC 3339 with a zone
    (``2026-03-01T09:30:00Z``), or a bare date (``2026-03-01``) meaning midnight UTC: the
    forms of API.md, for HTTP and the CLI alike.

    Raises ValueError with a message that names the problem, never one that quotes the text.
    """
    if text == NOW and now is not None:
        return now
    if len(text) > _MAX_TIME_TEXT:
        msg = f"is longer than {_MAX_TIME_TEXT} characters; write RFC 3339 or a date"
        raise ValueError(msg)
    if _BARE_DATE.fullmatch(text):
        moment = _from_iso(text).replace(tzinfo=UTC)
    else:
        moment = _from_iso(text.replace("z", "Z").replace("Z", "+00:00"))
    problem = time_problem(moment)
    if problem is not None:
        raise ValueError(problem)
    return moment


def _from_iso(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        msg = "is not a time: write now, RFC 3339 with a zone (2026-03-01T09:30:00Z) or a date (2026-03-01)"
        raise ValueError(msg) from None
