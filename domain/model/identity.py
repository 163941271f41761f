"""Who is calling: decided by the key alone, never by a request body."""

from __future__ import annotations

from typing import Literal

import msgspec

from memwarden.domain.model.trust import default_provenance_cap

Role = Literal["agent", "member", "auditor", "admin", "owner"]
ROLES: tuple[Role, ...] = ("agent", "member", "auditor", "admin", "owner")
ROLE_LEVEL: dict[str, int] = {"auditor": 0, "agent": 1, "member": 2, "admin": 3, "owner": 4}
HUMAN_ROLES = frozenset({"member", "admin", "owner"})
WRITER_ROLES = frozenset({"agent", "member", "admin", "owner"})
REVIEWER_ROLES = frozenset({"admin", "owner"})
OWNER_ROLES = frozenset({"owner"})
COMPLIANCE_ROLES = frozenset({"auditor", "admin", "owner"})
"""Compliance staff look down their subtree (as-of, audit, history); agents look up."""


class Identity(msgspec.Struct, frozen=True):
    namespace: str
    actor: str
    role: Role
    max_provenance: str | None = None
    """The highest provenance source this key may claim (set when the key was made); None:
    the role's default (``trust.default_provenance_cap``)."""

    @property
    def is_human(self) -> bool:
        return self.role in HUMAN_ROLES

    @property
    def provenance_cap(self) -> str:
        return self.max_provenance or default_provenance_cap(self.is_human)
