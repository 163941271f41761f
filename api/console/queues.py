"""The review queues the console shows: each one an admin list route, a decide route and its
one-click decisions. Findings, proposals and decisions plug in as more rows once their admin
routes exist (API.md); nothing else in the console changes."""

from __future__ import annotations

import msgspec


class ReviewQueue(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    title: str
    list_path: str
    decide_path: str
    """With ``{id}`` for the item's id."""
    columns: tuple[str, ...]
    decisions: tuple[str, ...]
    with_content: frozenset[str] = frozenset()
    """Decisions that carry the reviewer's replacement text."""


QUEUES: dict[str, ReviewQueue] = {
    "disputes": ReviewQueue(
        name="disputes",
        title="Disputes",
        list_path="/v1/admin/disputes",
        decide_path="/v1/admin/disputes/{id}/resolve",
        columns=("id", "namespace", "memory_id", "incumbent_id", "reason", "status", "opened_at"),
        decisions=("uphold_new", "keep_old", "both_valid", "edit"),
        with_content=frozenset({"edit"}),
    ),
}
