"""What "current" means in SQL, written once for every read model that asks.

A memory is *current* at an instant when it stands (active: not disputed, retired or
erased, and not retired by time) and its validity has not ended by that instant. The same
rule, over a row of ``memory_objects`` or an interval of ``memory_timeline``, decides what
a search, a count, an as-of list and the autopilot treat as current; the Python twin is
``MemoryState.is_current`` in ``domain.model.memory``.

Each function returns SQL text (no parameters of its own) so it composes both into a
``psycopg.sql.SQL`` template and into a plain query string; ``at`` is SQL too: ``now()``
or a placeholder such as ``%(v)s``.
"""

from __future__ import annotations

NOW = "now()"


def _column(alias: str | None, name: str) -> str:
    return f"{alias}.{name}" if alias else name


def unexpired(alias: str | None = None, at: str = NOW) -> str:
    """The row's validity has not ended by ``at`` (an open end never ends)."""
    valid_to = _column(alias, "valid_to")
    return f"({valid_to} IS NULL OR {valid_to} > {at})"


def in_effect(alias: str | None = None, at: str = NOW) -> str:
    """The row held in the world at ``at``: its validity began by then and had not ended."""
    return f"{_column(alias, 'valid_from')} <= {at} AND {unexpired(alias, at)}"


def current(alias: str | None = None, at: str = NOW, *, started: bool = False) -> str:
    """The "current memory" predicate: active, not retired, not expired by ``at``; with
    ``started``, also valid already at ``at`` (a read pinned to an instant asks that;
    a read of "now" also shows a memory whose validity begins later)."""
    validity = in_effect(alias, at) if started else unexpired(alias, at)
    return f"{_column(alias, 'status')} = 'active' AND {_column(alias, 'retired_at')} IS NULL AND {validity}"


def known_at(alias: str, position: str) -> str:
    """A ``memory_timeline`` interval the ledger had opened and not yet closed at ``position``."""
    return f"{alias}.opened <= {position} AND ({alias}.closed IS NULL OR {alias}.closed > {position})"
