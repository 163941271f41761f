"""Helpers for the projections' multi-row statements."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def array_literal(values: Iterable[Any]) -> str:
    """PostgreSQL's text form of a one-dimensional array, every element quoted. Rows whose
    columns are arrays cannot be unnested from a two-dimensional array (their lengths
    differ), so such a column travels as a ``text[]`` of these literals, cast back per row."""
    return "{" + ",".join('"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values) + "}"


def columns(rows: list[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows turned into one list per column (the arrays an ``unnest`` takes)."""
    return [list(column) for column in zip(*rows, strict=True)]
