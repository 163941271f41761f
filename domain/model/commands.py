"""Commands: what a caller asks for, imperative. Identity is never part of a command.

A command is also the one definition of its request body: the HTTP edge's body extends it
(api/http/schemas.py) with only what the edge adds (how to run the write, a version guard)
and leaves out what the path carries, so the two cannot drift apart."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import ConflictReview, DisputeDecision, MemoryScope, MemoryType
from memwarden.domain.model.trust import OverCap

AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""A time with its zone: a naive time cannot be ordered against the ledger's times."""


class ProvenanceClaim(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source: str = "conversation"
    ref: str | None = None


class WriteMemory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    content: str
    type: MemoryType = "fact"
    scope: MemoryScope = "team"
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None
    tags: tuple[str, ...] = ()
    selectors: tuple[str, ...] = ()
    provenance: ProvenanceClaim = ProvenanceClaim()
    event_time: AwareDatetime | None = None
    valid_from: AwareDatetime | None = None


class DisputeRuling(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A reviewer's ruling on a dispute: what ``ResolveDispute`` asks, bar which dispute
    (the HTTP edge takes that from the path)."""

    decision: DisputeDecision
    content: str | None = None
    value: str | None = None
    reason: str | None = None


class ResolveDispute(DisputeRuling, frozen=True, kw_only=True, forbid_unknown_fields=True):
    dispute_id: UUID


class VerifyMemory(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    memory_id: UUID
    supports: bool
    note: str | None = None


C = TypeVar("C", WriteMemory, ResolveDispute, VerifyMemory)
COMMANDS: tuple[type[msgspec.Struct], ...] = (WriteMemory, ResolveDispute, VerifyMemory)


def command_type(command: msgspec.Struct) -> type[Any]:
    """The command ``command`` is: its own type, or the command type a wire body extends."""
    return next(kind for kind in type(command).__mro__ if kind in COMMANDS)


def validated(command: C) -> C:
    """``command`` as exactly its command type, its field types checked: a Struct built in
    Python is not validated, and a wrongly typed value must never reach the ledger (it could
    not be decoded again). A wire body that extends the command is read as that command
    (what it adds, e.g. ``verbatim``, is left behind), in the same one conversion."""
    kind = command_type(command)
    fields = {f.encode_name: getattr(command, f.name) for f in msgspec.structs.fields(kind)}
    try:
        checked: C = msgspec.convert(msgspec.to_builtins(fields), kind)
    except (msgspec.ValidationError, TypeError) as error:
        raise InvalidRequest(f"invalid {kind.__name__}: {error}") from error
    return checked


class WritePolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The parts of a namespace's effective policy that the write path applies."""

    forbid_secrets: bool = True
    max_content_bytes: int = 16_384
    provenance_over_cap: OverCap = "cap"
    """A claim above the key's ``max_provenance``: lowered to the cap, or refused."""
    conflict_review: ConflictReview = "lower_trust"
    """How a contradiction the synchronous band judges is settled (the autopilot's dial)."""
