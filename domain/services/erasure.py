"""Run ``forget``: find, load, decide, sign, and append in ONE transaction the
MemoryErased events, the certificate, the audit record and the destruction of the
erased memories' data keys (DESIGN.md section 8)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol
from uuid import UUID

import msgspec

from domain.ledger.app import Ledger, StreamConflict
from domain.ledger.entropy import new_uuid
from domain.ledger.mapper import Recorded
from domain.model.certificates import DeletionCertificate
from domain.model.erasure import (
    Forget,
    ForgetState,
    Head,
    chain_of,
    decide_forget,
    own_writes_only,
    resolve_subtree,
    subject_keys,
    target_kind,
)
from domain.model.errors import DomainError, InvalidState
from domain.model.events import AuditRecorded, ErasureCertified
from domain.model.identity import Identity
from domain.model.memory import MemoryState
from domain.services.audit import Audit, AuditOutcome
from domain.services.memory import utcnow, version_events
from domain.services.streams import Streams

MAX_ATTEMPTS = 8


class ErasureLookup(Protocol):
    """Where the candidates of a subject or subtree erasure are found (a read model that
    has reached ``position``). Only a hint: the decider re-checks the ledger's state."""

    def in_subtree(self, root: str, position: int) -> list[UUID]: ...

    def naming_subject(self, root: str, keys: frozenset[str], position: int) -> list[UUID]: ...


class ForgetResult(msgspec.Struct, frozen=True, kw_only=True):
    erased: int
    certificate: DeletionCertificate
    position: int


class ErasureUnavailable(DomainError):
    code = "unavailable"


class ErasureService:
    def __init__(
        self,
        ledger: Ledger,
        streams: Streams,
        members_forget_own: Callable[[str], bool],
        lookup: ErasureLookup | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.ledger = ledger
        self.streams = streams
        self.members_forget_own = members_forget_own
        self.lookup = lookup
        self.clock = clock
        self.new_id = new_id
        # late-bound: a caller may swap the clock or id source after construction
        self.audit = Audit(ledger, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108

    def forget(self, identity: Identity, command: Forget, now: datetime | None = None) -> ForgetResult:
        return self.audit.audited(identity, "forget", lambda: self._forget(identity, command, now))

    def certificate(self, certificate_id: UUID) -> DeletionCertificate | None:
        return self.ledger.certificate(certificate_id)

    # -- the command ----------------------------------------------------------------------

    def _forget(self, identity: Identity, command: Forget, now: datetime | None) -> ForgetResult:
        kind = target_kind(command)
        members_forget_own = self.members_forget_own(identity.namespace)
        own_writes_only(identity, members_forget_own)  # refuse early, before any lookup
        certificate_id = self.new_id()
        for _ in range(MAX_ATTEMPTS):
            position, head_hash = self.ledger.recorder.head()
            targets = self._targets(identity, command, kind, position)
            memories = self._load_chains(targets)
            at = now or self.clock()
            decision = decide_forget(
                command,
                identity,
                ForgetState(targets=targets, memories=memories),
                members_forget_own,
                at,
                certificate_id,
                Head(position, head_hash.hex()),
                self.ledger.signing_key.key_id,
            )
            certificate = self.ledger.sign_certificate(decision.certificate)
            recorded = version_events(decision.events, {m.id: m.version for m in decision.erased})
            certified = ErasureCertified(certificate=certificate, at=at)
            audit = self._audit(
                identity,
                "ok",
                f"erased {certificate.count} by {kind}; certificate {certificate.id}",
                at,
                certificate.id,
            )
            try:
                appended = self.ledger.append(
                    [*recorded, Recorded(certificate.id, 1, certified), Recorded(audit.record_id, 1, audit)],
                    destroy_keys=[m.id for m in decision.erased],
                )
            except StreamConflict:
                self.streams.cache.drop(m.id for m in decision.erased)
                continue
            self.streams.remember(recorded)
            return ForgetResult(erased=certificate.count, certificate=certificate, position=appended)
        raise InvalidState("the memories kept changing during the erasure; retry")

    def _targets(self, identity: Identity, command: Forget, kind: str, position: int) -> tuple[UUID, ...]:
        if kind == "ids":
            return tuple(dict.fromkeys(command.ids or ()))
        if self.lookup is None:
            raise ErasureUnavailable("no lookup for subject or subtree erasure is configured")
        if kind == "subtree":
            root = resolve_subtree(identity, command.subtree or "")
            return tuple(self.lookup.in_subtree(root, position))
        keys = subject_keys(command.subject or "")
        return tuple(self.lookup.naming_subject(identity.namespace, keys, position))

    def _load_chains(self, targets: Sequence[UUID]) -> dict[UUID, MemoryState]:
        """The targets and every version in their supersedence chains, from the ledger."""
        memories = self.streams.memories(targets)
        for _ in range(10_000):
            _, missing = chain_of(memories, memories)
            if not missing:
                return memories
            found = self.streams.memories(missing)
            if not found:
                return memories
            memories.update(found)
        return memories

    # -- audit ----------------------------------------------------------------------------

    def _audit(
        self,
        identity: Identity,
        outcome: AuditOutcome,
        detail: str,
        now: datetime,
        subject: UUID | None = None,
    ) -> AuditRecorded:
        return self.audit.event(identity, "forget", outcome, detail, now, subject)
