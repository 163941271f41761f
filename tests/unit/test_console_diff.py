"""The as-of explorer's diff of two instants (pure)."""

from __future__ import annotations

from memwarden.api.console.diff import diff_memories


def _m(i: str, content: str, status: str = "active") -> dict[str, object]:
    return {"id": i, "content": content, "status": status, "trust_tier": "canonical", "valid_from": "t0"}


def test_diff_names_added_removed_and_changed_memories_only() -> None:
    before = [_m("a", "kept"), _m("b", "gone"), _m("c", "old text")]
    after = [_m("a", "kept"), _m("c", "old text", "retired"), _m("d", "new")]
    changes = {(c.id, c.kind) for c in diff_memories(before, after)}
    assert changes == {("b", "removed"), ("c", "changed"), ("d", "added")}
    assert diff_memories(before, before) == []
