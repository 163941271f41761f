"""The query parameters every list takes (API.md "Lists"), typed and declared once: Litestar
validates them and the OpenAPI document lists them, as it does bodies. A list answers
``{items, cursor, count}``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self
from uuid import UUID

import msgspec
from litestar.di import NamedDependency, Provide
from litestar.params import QueryParameter

from memwarden.api.http.schemas import ComplianceTime, compliance_time
from memwarden.domain.model.errors import Forbidden
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import is_within, validate_namespace
from memwarden.domain.model.text import quote_text
from memwarden.projections.autopilot.views import DecisionView, FindingView, ProposalView
from memwarden.projections.disputes.views import DisputeView
from memwarden.projections.governance.views import KeyView
from memwarden.projections.listing import DEFAULT_LIMIT, MAX_LIMIT, Listed, ListQuery
from memwarden.projections.memory_objects.views import StatementView

Cursor = Annotated[
    str | None,
    QueryParameter(
        description="the previous page's `cursor`, to read the page after it (absent: the first page)",
        max_length=120,
    ),
]
Limit = Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description="rows per page")]
Order = Annotated[Literal["oldest", "newest"], QueryParameter(description="`oldest` or `newest` first")]
Within = Annotated[
    str | None,
    QueryParameter(
        description="only this namespace and its descendants (within the caller's own)", max_length=255
    ),
]
Writer = Annotated[
    str | None,
    QueryParameter(description="only rows about a statement this actor wrote", min_length=1, max_length=128),
]
Rule = Annotated[
    str | None,
    QueryParameter(description="only rows the judge's (or drafter's) rule named so", max_length=64),
]
Since = Annotated[
    ComplianceTime | None,
    QueryParameter(description="only rows from this time on (`now`, RFC 3339 or a date)"),
]
Until = Annotated[ComplianceTime | None, QueryParameter(description="only rows before this time")]

PAGE_PARAMETERS = frozenset({"cursor", "limit", "order"})
REVIEW_PARAMETERS = PAGE_PARAMETERS | {"status", "namespace", "writer", "since", "until"}
"""What a reviewer's queue takes (the autopilot's findings and decisions and the proposals
take ``rule`` too); ``namespace`` names a subtree, never who the caller is."""


@dataclass(frozen=True, slots=True)
class Paging:
    cursor: str | None
    limit: int
    newest: bool


def paging(cursor: Cursor = None, limit: Limit = DEFAULT_LIMIT, order: Order = "oldest") -> Paging:
    """The dependency every list takes: where a page starts, how long, which way."""
    return Paging(cursor=cursor, limit=limit, newest=order == "newest")


@dataclass(frozen=True, slots=True)
class ReviewFilters:
    paging: Paging
    namespace: str | None
    writer: str | None
    since: str | None
    until: str | None

    def query(self, identity: Identity, status: str, rule: str | None = None) -> ListQuery:
        """The queue's question; a ``namespace`` outside the caller's subtree is refused."""
        return ListQuery(
            limit=self.paging.limit,
            newest=self.paging.newest,
            cursor=self.paging.cursor,
            status=None if status == "all" else status,
            namespace=_subtree(identity, self.namespace),
            rule=rule,
            writer=self.writer,
            since=compliance_time("since", self.since),
            until=compliance_time("until", self.until),
        )


PagingAsked = NamedDependency[Paging]
"""A handler's (or dependency's) paging, as Litestar injects it."""


def review_filters(
    page: PagingAsked,
    namespace: Within = None,
    writer: Writer = None,
    since: Since = None,
    until: Until = None,
) -> ReviewFilters:
    """The dependency a reviewer's queue takes: paging and the filters every queue shares."""
    return ReviewFilters(paging=page, namespace=namespace, writer=writer, since=since, until=until)


FiltersAsked = NamedDependency[ReviewFilters]

LIST_DEPENDENCIES = {
    "page": Provide(paging, sync_to_thread=False),
    "filters": Provide(review_filters, sync_to_thread=False),
}


def _subtree(identity: Identity, namespace: str | None) -> str | None:
    if namespace is None:
        return None
    asked = validate_namespace(namespace.strip("/"))
    if not is_within(asked, identity.namespace):
        raise Forbidden(f"namespace {quote_text(asked)} is outside your subtree")
    return asked


class Page(msgspec.Struct, frozen=True, kw_only=True):
    items: list[Any]
    cursor: str | None
    """The next page's cursor (null after the last page)."""


class CountedPage(Page, frozen=True, kw_only=True):
    count: int
    """Rows matching the filters, on every page."""

    @classmethod
    def of(cls, listed: Listed[Any]) -> Self:
        return cls(items=listed.items, cursor=listed.cursor, count=listed.count)


class ReviewPage(CountedPage, frozen=True, kw_only=True):
    statements: dict[UUID, StatementView]
    """The memories the page's items name (by id), each with what it says, its writer, trust
    tier, provenance and time: what a reviewer weighs. A memory the caller may not see (a
    sibling subtree's) is left out; an erased one has no content."""

    @classmethod
    def of(cls, listed: Listed[Any]) -> Self:
        return cls(items=listed.items, cursor=listed.cursor, count=listed.count, statements=listed.statements)


class FindingsPage(ReviewPage, frozen=True, kw_only=True):
    items: list[FindingView]


class DecisionsPage(ReviewPage, frozen=True, kw_only=True):
    items: list[DecisionView]


class ProposalsPage(ReviewPage, frozen=True, kw_only=True):
    items: list[ProposalView]


class DisputesPage(ReviewPage, frozen=True, kw_only=True):
    items: list[DisputeView]


class KeysPage(CountedPage, frozen=True, kw_only=True):
    items: list[KeyView]
