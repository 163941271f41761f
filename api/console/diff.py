"""What changed in a subtree between two as-of answers (pure)."""

from __future__ import annotations

from typing import Any

import msgspec

COMPARED = ("content", "status", "trust_tier", "valid_from", "valid_to", "retired_at")


class Change(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    kind: str
    """``added``, ``removed`` or ``changed``."""
    before: dict[str, Any] | None
    after: dict[str, Any] | None


def diff_memories(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[Change]:
    old = {str(m["id"]): m for m in before}
    new = {str(m["id"]): m for m in after}
    changes = [Change(id=i, kind="added", before=None, after=new[i]) for i in new if i not in old]
    changes += [Change(id=i, kind="removed", before=old[i], after=None) for i in old if i not in new]
    changes += [
        Change(id=i, kind="changed", before=old[i], after=new[i])
        for i in new
        if i in old and any(old[i].get(f) != new[i].get(f) for f in COMPARED)
    ]
    return changes
