"""The review queues the console shows: each one an admin list route, the statuses it can be
filtered by, and its one-click actions, each one admin route (API.md). The console's pages
and forms are the same for every queue; adding a queue is adding a row here."""

from __future__ import annotations

import msgspec


class Action(msgspec.Struct, frozen=True, kw_only=True):
    """One button of a queue item: a POST to ``path`` (with ``{id}``)."""

    name: str
    path: str
    decision: str | None = None
    """Sent as the body's ``decision``; None for routes whose path is the decision."""
    text: str | None = None
    """A body field the reviewer types (``content``, ``reason``), from the form field of that name."""
    text_required: bool = False
    placeholder: str = ""

    def body(self, typed: str) -> dict[str, str] | None:
        """The request body, from what the reviewer typed; None when the route takes none."""
        body: dict[str, str] = {}
        if self.decision is not None:
            body["decision"] = self.decision
        if self.text is not None and (typed or self.text_required):
            body[self.text] = typed
        return body if self.decision is not None or self.text is not None else None


class ReviewQueue(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    title: str
    list_path: str
    columns: tuple[str, ...]
    statuses: tuple[str, ...]
    """The values of the list route's ``status`` filter; the first is shown by default and
    is the one whose items can be acted on."""
    outcome: str
    """The column that says how a closed item ended."""
    actions: tuple[Action, ...]
    takes_reason: bool = False
    ruled: bool = False
    """Whether the list filters by ``rule`` (the judge's, or a proposal's kind)."""
    grouped_by: str | None = None
    """The statement a queue's items are grouped under (one row per statement), if any."""
    """Whether every action also sends the reviewer's optional ``reason`` (kept with the
    decision in the audit and the item's history)."""

    @property
    def actionable(self) -> str:
        return self.statuses[0]

    def action(self, name: str) -> Action | None:
        return next((a for a in self.actions if a.name == name), None)


MEMORY_COLUMNS = frozenset(
    {"memory_id", "incumbent_id", "replacement_id", "memory_a", "memory_b", "winner", "loser", "restored"}
    | {"canonical", "sources"}
)
"""Columns holding memory ids (or lists of them): shown as links to the memory's history."""


def _decisions(path: str, names: tuple[str, ...], **with_text: Action) -> tuple[Action, ...]:
    return tuple(with_text.get(name) or Action(name=name, path=path, decision=name) for name in names)


QUEUES: dict[str, ReviewQueue] = {
    "disputes": ReviewQueue(
        name="disputes",
        title="Disputes",
        list_path="/v1/admin/disputes",
        columns=("id", "namespace", "memory_id", "incumbent_id", "reason", "status", "opened_at"),
        statuses=("open", "resolved", "all"),
        outcome="decision",
        takes_reason=True,
        actions=_decisions(
            "/v1/admin/disputes/{id}/resolve",
            ("uphold_new", "keep_old", "both_valid", "edit"),
            edit=Action(
                name="edit",
                path="/v1/admin/disputes/{id}/resolve",
                decision="edit",
                text="content",
                text_required=True,
                placeholder="replacement text",
            ),
        ),
    ),
    "findings": ReviewQueue(
        ruled=True,
        grouped_by="memory_b",
        name="findings",
        title="Findings",
        list_path="/v1/admin/findings",
        columns=(
            "id",
            "namespace",
            "memory_a",
            "memory_b",
            "rule",
            "explanation",
            "cosine",
            "status",
            "opened_at",
        ),
        statuses=("open", "resolved", "all"),
        outcome="decision",
        takes_reason=True,
        actions=_decisions("/v1/admin/findings/{id}/resolve", ("keep_a", "keep_b", "both_valid", "dismiss")),
    ),
    "proposals": ReviewQueue(
        ruled=True,
        name="proposals",
        title="Proposals",
        list_path="/v1/admin/proposals",
        columns=(
            "id",
            "namespace",
            "kind",
            "sources",
            "canonical",
            "drafter",
            "edited",
            "status",
            "drafted_at",
        ),
        statuses=("pending_review", "approved", "rejected", "all"),
        outcome="status",
        actions=(
            Action(name="approve", path="/v1/admin/proposals/{id}/approve"),
            Action(
                name="edit",
                path="/v1/admin/proposals/{id}/edit",
                text="content",
                text_required=True,
                placeholder="the text to publish",
            ),
            Action(name="reject", path="/v1/admin/proposals/{id}/reject"),
        ),
    ),
    "decisions": ReviewQueue(
        ruled=True,
        name="decisions",
        title="Decisions",
        list_path="/v1/admin/decisions",
        columns=(
            "id",
            "namespace",
            "winner",
            "loser",
            "rule",
            "explanation",
            "dial",
            "status",
            "settled_at",
        ),
        statuses=("settled", "overturned", "all"),
        outcome="status",
        actions=(
            Action(
                name="overturn",
                path="/v1/admin/decisions/{id}/overturn",
                text="reason",
                placeholder="reason (optional)",
            ),
        ),
    ),
}


def grouped(
    queue: ReviewQueue, items: list[dict[str, object]]
) -> list[tuple[object, list[dict[str, object]]]]:
    """The page's items under the statement each is about (first appearance first), so an
    import that contradicts many older statements is one row per new statement; a queue
    without groups has one item a group."""
    if queue.grouped_by is None:
        return [(item.get("id"), [item]) for item in items]
    groups: dict[object, list[dict[str, object]]] = {}
    for item in items:
        groups.setdefault(item.get(queue.grouped_by), []).append(item)
    return list(groups.items())
