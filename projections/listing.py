"""Keyset paging over the read models' lists (the reviewers' queues, keys): oldest or newest
first, filters, a cursor that stays valid while rows are added, and the count of everything
that matches, so a reviewer sees how much is waiting and never loses a row between pages."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar
from uuid import UUID

import msgspec
from psycopg import Connection
from psycopg.sql import SQL, Composable, Identifier

from memwarden.domain.model.errors import InvalidRequest
from memwarden.projections.scopes import in_subtree

V = TypeVar("V", bound=msgspec.Struct)

DEFAULT_LIMIT = 100
MAX_LIMIT = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CURSOR = re.compile(r"(\d{1,16})~([A-Za-z0-9_.-]{1,80})")


@dataclass(frozen=True, slots=True)
class ListQuery:
    """What a caller asks of a list; every filter is optional."""

    limit: int = DEFAULT_LIMIT
    newest: bool = False
    cursor: str | None = None
    """The last row of the previous page, as the previous page's ``cursor`` gave it."""
    status: str | None = None
    namespace: str | None = None
    """A subtree within the caller's own (checked by the caller of ``page``)."""
    rule: str | None = None
    writer: str | None = None
    """The actor who wrote either statement the row is about."""
    since: datetime | None = None
    until: datetime | None = None
    group: UUID | None = None
    """Only the rows of one group (the findings about one statement)."""


@dataclass(frozen=True, slots=True)
class ListedTable:
    """How one read model's table is listed."""

    table: str
    columns: Sequence[str]
    time: str
    """The column pages are ordered by (then ``key``)."""
    key: str = "id"
    key_is_uuid: bool = True
    rule: str | None = None
    """The column ``rule`` filters on (None: the list takes no rule)."""
    memories: str | None = None
    """An SQL array of the memories a row is about (``writer`` filters on their actors)."""
    group: str | None = None
    """The column ``group`` filters on (None: the list has no groups)."""


@dataclass(frozen=True, slots=True)
class Listed(Generic[V]):
    items: list[V]
    cursor: str | None
    """The next page's cursor; None after the last page."""
    count: int
    """Rows matching the filters, on every page."""
    statements: dict[UUID, Any] = field(default_factory=dict)
    """The memories the page's rows are about, as their reader may see them."""


def page(
    conn: Connection[Any],
    schema: str,
    table: ListedTable,
    root: str,
    query: ListQuery,
    make: Callable[[dict[str, Any]], V],
) -> Listed[V]:
    """One page of ``table``'s rows in ``root``'s subtree that match ``query``."""
    _check_limit(query.limit)
    conditions, params = _filters(schema, table, query.namespace or root, query)
    count = conn.execute(
        SQL("SELECT count(*) AS n FROM {s}.{t} AS t WHERE {w}").format(
            s=Identifier(schema), t=Identifier(table.table), w=SQL(" AND ").join(conditions)
        ),
        params,
    ).fetchone()
    after = _after(table, query)
    if after is not None:
        conditions = [*conditions, after[0]]
        params = {**params, **after[1]}
    direction = SQL("DESC" if query.newest else "ASC")
    rows = conn.execute(
        SQL(
            "SELECT {cols} FROM {s}.{t} AS t WHERE {w} ORDER BY {time} {d}, {key} {d} LIMIT %(limit)s"
        ).format(
            cols=SQL(", ").join(SQL("t.") + Identifier(c) for c in table.columns),
            s=Identifier(schema),
            t=Identifier(table.table),
            w=SQL(" AND ").join(conditions),
            time=Identifier(table.time),
            key=Identifier(table.key),
            d=direction,
        ),
        {**params, "limit": query.limit},
    ).fetchall()
    items = [make(row) for row in rows]
    cursor = _cursor_of(rows[-1], table) if len(rows) == query.limit else None
    return Listed(items=items, cursor=cursor, count=int(count["n"]) if count else 0)


def every(read: Callable[[ListQuery], Listed[V]], query: ListQuery | None = None) -> Iterator[V]:
    """Every row of a list, page after page (for commands that print all of it)."""
    asked = query or ListQuery(limit=MAX_LIMIT)
    while True:
        found = read(asked)
        yield from found.items
        if found.cursor is None:
            return
        asked = replace(asked, cursor=found.cursor)


def _check_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")


def _filters(
    schema: str, table: ListedTable, root: str, query: ListQuery
) -> tuple[list[Composable], dict[str, Any]]:
    subtree, params = in_subtree("t.namespace", root)
    conditions: list[Composable] = [subtree]
    for name, column in (("status", "status"), ("rule", table.rule), ("group", table.group)):
        value = getattr(query, name)
        if value is None:
            continue
        if column is None:
            raise InvalidRequest(f"{table.table} have no {name} to filter by")
        conditions.append(SQL("t.{c} = %({n})s").format(c=Identifier(column), n=SQL(name)))
        params[name] = value
    if query.writer is not None:
        if table.memories is None:
            raise InvalidRequest(f"{table.table} have no writer to filter by")
        # the writer's memories once (a hashed subplan), then each row's few ids probed in it:
        # a probe of memory_objects for every row would cost the whole count
        conditions.append(
            SQL(
                "EXISTS (SELECT 1 FROM unnest(" + table.memories + ") AS about(id) WHERE about.id IN"
                " (SELECT w.id FROM {s}.memory_objects w WHERE w.actor = %(writer)s))"
            ).format(s=Identifier(schema))
        )
        params["writer"] = query.writer
    for name, operator in (("since", ">="), ("until", "<")):
        value = getattr(query, name)
        if value is not None:
            conditions.append(SQL("t.") + Identifier(table.time) + SQL(f" {operator} %({name})s"))
            params[name] = value
    return conditions, params


def _after(table: ListedTable, query: ListQuery) -> tuple[Composable, dict[str, Any]] | None:
    """The keyset condition past the cursor's row, in the page's direction."""
    if query.cursor is None:
        return None
    time, key = _parse_cursor(query.cursor, table)
    condition = SQL("({time}, {key}) {op} (%(after_time)s, %(after_key)s)").format(
        time=SQL("t.") + Identifier(table.time),
        key=SQL("t.") + Identifier(table.key),
        op=SQL("<" if query.newest else ">"),
    )
    return condition, {"after_time": time, "after_key": key}


def _cursor_of(row: dict[str, Any], table: ListedTable) -> str:
    micros = (row[table.time] - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}~{row[table.key]}"


def _parse_cursor(cursor: str, table: ListedTable) -> tuple[datetime, UUID | str]:
    found = _CURSOR.fullmatch(cursor)
    if found is None:
        raise InvalidRequest("malformed cursor")
    time = _EPOCH + timedelta(microseconds=int(found.group(1)))
    if not table.key_is_uuid:
        return time, found.group(2)
    try:
        return time, UUID(found.group(2))
    except ValueError:
        raise InvalidRequest("malformed cursor") from None
