"""API keys: who may mint which key, and the state a key's events fold into.

A key is ``mw_<key_id>_<secret>``; the ledger keeps only a keyed hash of the secret
(the service computes it, this module never sees a secret). Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from datetime import datetime

import msgspec

from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound, OutsideSubtree
from memwarden.domain.model.events import Event, KeyIssued, KeyRevoked
from memwarden.domain.model.identity import HUMAN_ROLES, REVIEWER_ROLES, ROLE_LEVEL, ROLES, Identity, Role
from memwarden.domain.model.namespaces import is_within, validate_namespace
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import invisible_character, mixed_script
from memwarden.domain.model.trust import HUMAN_ONLY_SOURCES, SOURCE_RANKS

KEY_PREFIX = "mw"
_KEY = re.compile(r"mw_([0-9a-f]{32})_([A-Za-z0-9]{20,128})")
_ACTOR = re.compile(r"[^\s\x00-\x1f]{1,128}")


class IssueKey(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    target: str
    actor: str
    role: str
    max_provenance: str | None = None
    """The highest provenance source the key may claim; None: the role's default."""


class KeyState(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    key_hash: str
    namespace: str
    actor: str
    role: Role
    issued_by: str
    issued_at: datetime
    revoked_at: datetime | None = None
    version: int = 0
    max_provenance: str | None = None

    @property
    def identity(self) -> Identity:
        return Identity(self.namespace, self.actor, self.role, self.max_provenance)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None


def parse_key(presented: str) -> tuple[str, str] | None:
    """``(key_id, secret)`` of a well-formed key, else None."""
    match = _KEY.fullmatch(presented)
    return (match.group(1), match.group(2)) if match else None


def format_key(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}_{key_id}_{secret}"


def check_actor_name(actor: str) -> None:
    """An actor name is what audit records and reviewers see: 1-128 characters, no space,
    and nothing invisible (``bot`` followed by U+200B would pass for ``bot``)."""
    if not _ACTOR.fullmatch(actor):
        raise InvalidRequest("actor must be 1-128 characters without spaces")
    hidden = invisible_character(actor)
    if hidden is not None:
        raise InvalidRequest(f"actor contains an invisible character (U+{ord(hidden):04X})")
    scripts = mixed_script(actor)
    if scripts is not None:
        raise InvalidRequest(f"actor mixes {scripts[0]} and {scripts[1]} letters in one word")


def check_key_admin(caller: Identity) -> None:
    if caller.role not in REVIEWER_ROLES:
        raise Forbidden(f"role {caller.role!r} may not manage keys")


def decide_issue(caller: Identity, command: IssueKey, key_id: str, key_hash: str, now: datetime) -> KeyIssued:
    """Mint a key for ``command.target``: only admins and owners, never above their own role,
    never outside their subtree."""
    check_key_admin(caller)
    check_storable(command)
    validate_namespace(command.target)
    if command.role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}")
    check_actor_name(command.actor)
    if ROLE_LEVEL[command.role] > ROLE_LEVEL[caller.role]:
        raise Forbidden(f"a {caller.role} may not mint a key with role {command.role!r}")
    if not is_within(command.target, caller.namespace):
        raise OutsideSubtree(f"{command.target!r} is outside {caller.namespace!r}")
    _check_provenance_cap(caller, command)
    return KeyIssued(
        key_id=key_id,
        key_hash=key_hash,
        namespace=command.target,
        actor=command.actor,
        role=command.role,
        issued_by=caller.actor,
        max_provenance=command.max_provenance,
        at=now,
    )


def _check_provenance_cap(caller: Identity, command: IssueKey) -> None:
    """A key's cap is a known source, ``manual`` only for a person's key, and never above the
    cap of the key that makes it (an admin limited to ``document`` cannot mint ``manual``)."""
    cap = command.max_provenance
    if cap is None:
        return
    if cap not in SOURCE_RANKS:
        raise InvalidRequest(f"max_provenance must be one of {', '.join(SOURCE_RANKS)}")
    if cap in HUMAN_ONLY_SOURCES and command.role not in HUMAN_ROLES:
        raise InvalidRequest(f"a key with role {command.role!r} may not claim {cap!r} provenance")
    if SOURCE_RANKS[cap] > SOURCE_RANKS[caller.provenance_cap]:
        raise Forbidden(f"a key that may claim at most {caller.provenance_cap!r} may not grant {cap!r}")


def decide_revoke(caller: Identity, key: KeyState | None, now: datetime) -> KeyRevoked:
    check_key_admin(caller)
    if key is None or not is_within(key.namespace, caller.namespace):
        raise NotFound("no such key")
    if ROLE_LEVEL[key.role] > ROLE_LEVEL[caller.role]:
        raise Forbidden(f"a {caller.role} may not revoke a key with role {key.role!r}")
    if key.revoked:
        raise InvalidState("key already revoked")
    return KeyRevoked(key_id=key.key_id, revoked_by=caller.actor, at=now)


def evolve_key(state: KeyState | None, event: Event) -> KeyState:
    if isinstance(event, KeyIssued):
        if event.role not in ROLES:
            msg = f"unknown role {event.role!r}"
            raise TypeError(msg)
        role: Role = event.role
        return KeyState(
            key_id=event.key_id,
            key_hash=event.key_hash,
            namespace=event.namespace,
            actor=event.actor,
            role=role,
            issued_by=event.issued_by,
            issued_at=event.at,
            version=1,
            max_provenance=event.max_provenance,
        )
    if state is None:
        msg = f"{type(event).__name__} before KeyIssued"
        raise TypeError(msg)
    if isinstance(event, KeyRevoked):
        return msgspec.structs.replace(state, revoked_at=event.at, version=state.version + 1)
    msg = f"not a key event: {type(event).__name__}"
    raise TypeError(msg)
