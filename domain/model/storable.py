"""What the ledger accepts must be storable by every projection: one walk over a command,
a request body or decoded JSON finds the first text PostgreSQL cannot hold (NUL, a lone
surrogate) or time it cannot hold (no zone, outside years 1-9999 in UTC), and names its
field (``content``, ``tags[0]``, ``items[3].provenance.ref``) without quoting it.

The HTTP edge uses it to answer 400 before anything runs; the deciders use it so that no
way around the edge (CLI, import, a service called in-process) can append such a value.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import datetime

import msgspec

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.text import escape_unprintable, storable_text_problem
from memwarden.domain.model.times import time_problem


def unstorable_field(value: object, path: str = "") -> str | None:
    """``"<field> <problem>"`` for the first value under ``value`` that cannot be stored, or
    None. Iterative, so any depth of nesting is walked without recursion."""
    pending: list[tuple[str, object]] = [(path, value)]
    while pending:
        where, item = pending.pop()
        problem = _problem(item)
        if problem is not None:
            return f"{where or 'the body'} {problem}"
        if isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and (key_problem := storable_text_problem(key)) is not None:
                    return f"a field name in {where or 'the body'} {key_problem}"
        pending.extend(reversed(list(_children(where, item))))
    return None


def check_storable(value: object, path: str = "") -> None:
    """Raise InvalidRequest naming the first field of ``value`` that cannot be stored."""
    problem = unstorable_field(value, path)
    if problem is not None:
        raise InvalidRequest(problem)


def _problem(item: object) -> str | None:
    if isinstance(item, str):
        return storable_text_problem(item)
    if isinstance(item, datetime):
        return time_problem(item)
    return None


def _children(where: str, item: object) -> Iterator[tuple[str, object]]:
    if isinstance(item, msgspec.Struct):
        for attribute, wire_name in _wire_names(type(item)):
            yield _member(where, wire_name), getattr(item, attribute)
    elif isinstance(item, dict):
        for key, member in item.items():
            yield _member(where, escape_unprintable(str(key))[:64]), member
    elif isinstance(item, list | tuple | set | frozenset):
        for index, member in enumerate(item):
            yield f"{where}[{index}]", member


def _member(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


@functools.cache
def _wire_names(struct_type: type[msgspec.Struct]) -> tuple[tuple[str, str], ...]:
    """(attribute, name on the wire) of each field: ``run_async`` is ``async`` to a caller."""
    return tuple((f.name, f.encode_name) for f in msgspec.structs.fields(struct_type))
