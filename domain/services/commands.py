"""The one way a command runs: load state, decide, append the events together with their
audit record in one transaction, retry on a stream conflict, keep the caches right.

A command is a ``decide(now) -> Decided`` callable: it loads the state it needs (through
the stream cache, which may be stale), decides purely, and says what to append and which
stream versions the decision read. The runner appends. When another writer took one of
those versions meanwhile (``StreamConflict``), it drops the cached states of the streams
it meant to extend and decides again on fresh state, a bounded number of times. A
syscall that is refused is audited as denied (or miss), one that fails as error; an
audit record on its own (a read, a denial) goes through the same append.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.ledger.app import NewMemoryKey, StreamConflict
from memwarden.domain.ledger.database import unavailable
from memwarden.domain.ledger.mapper import Recorded
from memwarden.domain.model.errors import DomainError, InvalidState, NotFound
from memwarden.domain.model.events import AuditOutcome, Event
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.namespaces import ANONYMOUS_TENANT, tenant_of
from memwarden.domain.ports import CommandLedger
from memwarden.domain.services.audit import audit_record
from memwarden.domain.services.streams import Streams

MAX_ATTEMPTS = 12
"""How many times a command is decided again after a stream conflict, by default."""
R = TypeVar("R")
T = TypeVar("T")


def utcnow() -> datetime:
    """The services' clock, unless the composition root gives them another."""
    return datetime.now(UTC)


class TooMuchContention(InvalidState):
    """The streams kept moving under this command; the caller may simply retry."""


class Note(msgspec.Struct, frozen=True):
    """The audit record a command appends with its work."""

    detail: str
    outcome: AuditOutcome = "ok"
    subjects: tuple[UUID, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Decided(Generic[R]):
    """What one attempt decided. ``events`` go in at the next versions of their streams
    after ``versions`` (what the decision read; a stream not named there is new);
    ``fenced`` records come already versioned (a lease's fence, a certificate). ``note``:
    the audit record, None only for a pass that is no syscall. ``result``: the command's
    answer, given the append's position."""

    result: Callable[[int], R]
    events: Sequence[Event] = ()
    versions: Mapping[UUID, int] = field(default_factory=dict)
    note: Note | None = None
    fenced: Sequence[Recorded] = ()
    new_keys: Sequence[NewMemoryKey] = ()
    destroy_keys: Sequence[UUID] = ()


@dataclass(frozen=True)
class Retry:
    """How a command meets a stream conflict. ``contended``: the ``TooMuchContention``
    message once ``attempts`` are spent. ``on_conflict``: run before deciding again (it
    may raise instead: a lease lost, a conflict the caller must see). ``invalidate``:
    drops the caches the append invalidates, once it was tried (appended or not)."""

    contended: str
    attempts: int = MAX_ATTEMPTS
    on_conflict: Callable[[], None] | None = None
    invalidate: Callable[[], None] | None = None


LONE_RECORD = Retry("the audit record could not be appended", attempts=1)
SPOOLED = 0
"""The position ``record`` answers for a record kept in the spool (no position yet)."""


def version_events(events: Iterable[Event], versions: Mapping[UUID, int]) -> list[Recorded]:
    """Give each event the next version of its stream (new streams start at 1)."""
    next_version = dict(versions)
    recorded = []
    for event in events:
        stream = event.stream_id
        version = next_version.get(stream, 0) + 1
        next_version[stream] = version
        recorded.append(Recorded(stream, version, event))
    return recorded


def append_tenant(identity: Identity | None, records: Sequence[Recorded]) -> str:
    """The tenant of an append (whose chain it goes on, ``MEMWARDEN_LEDGER_CHAINS=tenant``):
    the caller's; for a worker pass (no identity) the tenant of the first namespace its
    events name (its lease's, its findings'); a request without a valid key has none."""
    if identity is not None:
        return tenant_of(identity.namespace)
    for recorded in records:
        namespace = getattr(recorded.event, "namespace", None)
        if isinstance(namespace, str) and namespace:
            return tenant_of(namespace)
    return ANONYMOUS_TENANT


class CommandRunner:
    """Runs commands on one ledger. ``streams``: the stream cache the appended events
    advance (None for a service that reads no cached state). ``clock`` and ``new_id``
    are called at each use, so a caller may swap what they stand for."""

    def __init__(
        self,
        ledger: CommandLedger,
        streams: Streams | None,
        clock: Callable[[], datetime],
        new_id: Callable[[], UUID],
    ) -> None:
        self.ledger = ledger
        self.streams = streams
        self.clock = clock
        self.new_id = new_id

    def command(
        self,
        identity: Identity,
        op: str,
        decide: Callable[[datetime], Decided[R]],
        retry: Retry,
        now: datetime | None = None,
    ) -> R:
        """Run ``decide`` as the syscall ``op``, audited whatever its outcome."""
        return self.audited(identity, op, lambda: self.run(identity, op, decide, retry, now))

    def run(
        self,
        identity: Identity | None,
        op: str,
        decide: Callable[[datetime], Decided[R]],
        retry: Retry,
        now: datetime | None = None,
    ) -> R:
        """Decide and append, again after each stream conflict (``retry``). ``now``: the
        time of every attempt (default: the clock's, read at each attempt)."""
        try:
            for _ in range(retry.attempts):
                at = now or self.clock()
                decided = decide(at)
                recorded = version_events(decided.events, decided.versions)
                try:
                    position = self._append(identity, op, at, decided, recorded)
                except StreamConflict:
                    if self.streams is not None:
                        self.streams.cache.drop(r.originator_id for r in recorded)
                    if retry.on_conflict is not None:
                        retry.on_conflict()
                    continue
                if self.streams is not None:
                    self.streams.remember(recorded)
                return decided.result(position)
        finally:
            if retry.invalidate is not None:
                retry.invalidate()
        raise TooMuchContention(retry.contended)

    def _append(
        self, identity: Identity | None, op: str, at: datetime, decided: Decided[R], recorded: list[Recorded]
    ) -> int:
        records = [*recorded, *decided.fenced]
        note = decided.note
        if note is not None:
            audit = audit_record(self.new_id(), identity, op, note.outcome, note.detail, at, note.subjects)
            records.append(Recorded(audit.record_id, 1, audit))
        tenant = append_tenant(identity, records)
        return self.ledger.append(records, decided.new_keys, decided.destroy_keys, tenant=tenant)

    # -- audit records ----------------------------------------------------------------------

    def record(
        self,
        identity: Identity | None,
        op: str,
        outcome: AuditOutcome,
        detail: str,
        subjects: Sequence[UUID] = (),
    ) -> int:
        """Append an audit record on its own (a read, a denial, a failure); its position, or
        ``SPOOLED`` when the ledger takes no writes now and the record waits in the spool.
        ``identity`` None: a request without a valid key."""
        note = Note(detail, outcome, tuple(subjects))
        try:
            return self.run(identity, op, lambda _at: Decided(result=lambda p: p, note=note), LONE_RECORD)
        except Exception as error:
            if not unavailable(error):
                raise
            self.keep(identity, op, note, error)
            return SPOOLED

    def keep(self, identity: Identity | None, op: str, note: Note, cause: Exception) -> None:
        """Keep the record the ledger cannot take now (``cause``) in the ledger's spool, to
        be appended once it can. Without a spool, or when it cannot keep it, ``cause`` is
        raised: the call is refused rather than left off the record."""
        spool = self.ledger.audit_spool
        if spool is None:
            raise cause
        record = audit_record(
            self.new_id(), identity, op, note.outcome, note.detail, self.clock(), note.subjects
        )
        try:
            spool.keep(record)
        except OSError as error:
            # ``cause`` keeps its own chain: it is what says the database is unavailable
            cause.add_note(f"the audit spool could not keep the record either: {error}")
            raise cause from cause.__cause__

    def audited(self, identity: Identity, op: str, work: Callable[[], T]) -> T:
        """Run a syscall: a refusal is audited (denied, or miss for not found) and so is a
        failure (error); a successful run appends its own record with its work."""
        try:
            return work()
        except DomainError as error:
            self.refused(identity, op, error)
            raise
        except Exception as error:
            self.failed(identity, op, error, type(error).__name__)
            raise

    def refused(
        self,
        identity: Identity,
        op: str,
        error: DomainError,
        detail: str | None = None,
        subject: UUID | None = None,
    ) -> int:
        """Audit a refusal: miss for not found, else denied; ``detail`` instead of the error's."""
        outcome: AuditOutcome = "miss" if isinstance(error, NotFound) else "denied"
        subjects = (subject,) if subject is not None else ()
        return self.record(identity, op, outcome, f"{error.code}: {detail or error.detail}", subjects)

    def failed(
        self, identity: Identity, op: str, error: Exception, detail: str, subject: UUID | None = None
    ) -> None:
        """Audit a failure (error). When the database itself is away its record goes to the
        spool at once (an append would wait for the database, and fail). When the record
        fails too, ``error`` is raised from that failure."""
        subjects = (subject,) if subject is not None else ()
        try:
            if unavailable(error):
                self.keep(identity, op, Note(detail, "error", subjects), error)
            else:
                self.record(identity, op, "error", detail, subjects)
        except Exception as audit_error:  # the ledger itself may be what failed
            if audit_error is error:
                raise
            raise error from audit_error
