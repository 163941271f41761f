"""SQL for a namespace subtree (docs/architecture.md §7): the root itself, or a descendant matched by
an escaped LIKE pattern anchored on ``/`` (``acme/eng`` never matches ``acme/engineering``,
and ``_``, ``%``, ``\\`` in a name are literal)."""

from __future__ import annotations

from typing import Any

from psycopg.sql import SQL, Composed, Identifier

from memwarden.domain.model.namespaces import subtree_like_pattern


def in_subtree(column: str, root: str) -> tuple[Composed, dict[str, Any]]:
    """The condition on ``column`` (``alias.name``) and its named parameters."""
    condition = SQL("({c} = %(subtree_root)s OR {c} LIKE %(subtree_pattern)s ESCAPE '\\')").format(
        c=Identifier(*column.split("."))
    )
    return condition, {"subtree_root": root, "subtree_pattern": subtree_like_pattern(root)}
