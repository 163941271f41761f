"""As-of reads, the service a route or a command calls: the same question answered by
indexed SQL (``sql``), by replaying the ledger (``replay``), or by both, compared
(``verify``). A route is a thin controller over these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.asof import AsOfAnswer, AsOfMemory, differences
from memwarden.domain.model.errors import InvalidRequest, OutsideSubtree
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import is_within, validate_namespace
from memwarden.domain.model.scopes import Subtree
from memwarden.projections.replay import ReplayEngine
from memwarden.projections.timeline.views import as_of_memories, memory_at, position_at

MAX_LIMIT = 1000


class AsOfQuestion(msgspec.Struct, frozen=True, kw_only=True):
    """``as_of`` None = now (everything the ledger holds); ``valid_at`` None = ``as_of``.
    ``scope``: enumerated namespaces (an agent's own and its ancestors), or a ``Subtree``
    (compliance staff look down)."""

    scope: tuple[str, ...] | Subtree
    as_of: datetime | None = None
    valid_at: datetime | None = None
    query: str | None = None
    limit: int | None = None
    after: UUID | None = None


class Verification(msgspec.Struct, frozen=True, kw_only=True):
    sql: AsOfAnswer
    replay: AsOfAnswer
    differences: list[str]

    @property
    def ok(self) -> bool:
        return not self.differences


def scope_for(identity: Identity, target: str | None = None) -> Subtree:
    """What compliance staff look at: the subtree of ``target``, a namespace inside the
    caller's subtree, or of the caller's own namespace (docs/architecture.md §7)."""
    if target is None:
        return Subtree(identity.namespace)
    validate_namespace(target)
    if not is_within(target, identity.namespace):
        raise OutsideSubtree(f"{target!r} is not inside {identity.namespace!r}")
    return Subtree(target)


def parse_cursor(cursor: str | None) -> UUID | None:
    if cursor is None:
        return None
    try:
        return UUID(cursor)
    except ValueError as error:
        raise InvalidRequest("malformed cursor") from error


def check_limit(limit: int | None) -> int | None:
    if limit is not None and not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}")
    return limit


def aware(moment: datetime | None, name: str) -> datetime | None:
    if moment is not None and moment.tzinfo is None:
        raise InvalidRequest(f"{name} must carry a time zone")
    return moment


class TimeTravel:
    def __init__(
        self,
        ledger: Ledger,
        wait_for: Callable[[int | None], None],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.ledger = ledger
        self.wait_for = wait_for
        self.clock = clock
        self.replayer = ReplayEngine(ledger)

    def _times(self, question: AsOfQuestion) -> tuple[datetime, datetime]:
        as_of = aware(question.as_of, "as_of") or self.clock()
        valid_at = aware(question.valid_at, "valid_at") or as_of
        check_limit(question.limit)
        return as_of, valid_at

    def sql(self, question: AsOfQuestion, upto: int | None = None) -> AsOfAnswer:
        as_of, valid_at = self._times(question)
        cap = self.ledger.head_position() if upto is None else upto
        self.wait_for(cap)
        with self.ledger.datastore.get_connection() as conn:
            position = position_at(conn, self.ledger.schema, as_of, cap)
            memories = as_of_memories(
                conn,
                self.ledger.schema,
                question.scope,
                position,
                valid_at,
                question.query,
                question.limit,
                question.after,
            )
        return AsOfAnswer(
            as_of=as_of,
            valid_at=valid_at,
            position=position,
            memories=memories,
            next_cursor=_cursor(memories, question.limit),
            engine="sql",
        )

    def read(
        self, scope: Sequence[str], memory_id: UUID, as_of: datetime | None, valid_at: datetime | None
    ) -> AsOfMemory | None:
        """One memory as known at ``as_of`` (default now), held at ``valid_at`` if given."""
        return self.lookup(scope, memory_id, as_of, valid_at).memory

    def lookup(
        self, scope: Sequence[str], memory_id: UUID, as_of: datetime | None, valid_at: datetime | None
    ) -> Lookup:
        """``read``, with the instant it answered for and the ledger position that maps to;
        without ``valid_at``'s condition too when that condition alone hid the memory (so a
        caller can say "not valid then" rather than "not known then")."""
        when = aware(as_of, "as_of") or self.clock()
        valid = aware(valid_at, "valid_at")
        cap = self.ledger.head_position()
        self.wait_for(cap)
        with self.ledger.datastore.get_connection() as conn:
            position = position_at(conn, self.ledger.schema, when, cap)
            found = memory_at(conn, self.ledger.schema, scope, memory_id, position, valid)
            known = found
            if found is None and valid is not None:
                known = memory_at(conn, self.ledger.schema, scope, memory_id, position, None)
            return Lookup(as_of=when, valid_at=valid, position=position, memory=found, known=known)

    def replay(self, question: AsOfQuestion, upto: int | None = None, snapshots: bool = True) -> AsOfAnswer:
        as_of, valid_at = self._times(question)
        answer = self.replayer.answer(
            question.scope,
            as_of,
            valid_at,
            query=question.query,
            limit=question.limit,
            after=question.after,
            upto=upto,
            snapshots=snapshots,
        )
        return msgspec.structs.replace(answer, next_cursor=_cursor(answer.memories, question.limit))

    def verify(self, question: AsOfQuestion, snapshots: bool = True) -> Verification:
        """Both engines on the same ledger prefix (the head when it starts), compared."""
        if question.as_of is None:
            question = msgspec.structs.replace(question, as_of=self.clock())
        head = self.ledger.head_position()
        sql = self.sql(question, upto=head)
        replay = self.replay(question, upto=head, snapshots=snapshots)
        return Verification(sql=sql, replay=replay, differences=differences(sql, replay))


class Lookup(msgspec.Struct, frozen=True, kw_only=True):
    as_of: datetime
    valid_at: datetime | None
    position: int
    memory: AsOfMemory | None
    """The memory known at ``as_of`` and held at ``valid_at``, or None."""
    known: AsOfMemory | None
    """The memory known at ``as_of``, whether or not it held at ``valid_at``."""


def _cursor(memories: Sequence[AsOfMemory], limit: int | None) -> str | None:
    if limit is None or len(memories) < limit or not memories:
        return None
    return str(memories[-1].id)
