"""The trust lattice (docs/architecture.md section 3), roles, and the trust tier of verifications."""

from __future__ import annotations

import pytest

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.events import Provenance
from memwarden.domain.model.identity import HUMAN_ROLES, REVIEWER_ROLES, ROLES, WRITER_ROLES, Identity
from memwarden.domain.model.memory import Verification, trust_tier_from
from memwarden.domain.model.trust import (
    DEFAULT_SOURCE,
    HUMAN_ONLY_SOURCES,
    SOURCE_RANKS,
    rank_of,
    source_rank,
)
from tests.unit.builders import T0, at, memory


def test_the_lattice() -> None:
    assert source_rank("manual") == 50
    assert source_rank("document") == source_rank("live-fetch") == 40
    assert source_rank("consolidation") == 30
    assert source_rank("swap-import") == 20
    assert source_rank("conversation") == 10
    order = ["manual", "document", "consolidation", "swap-import", "conversation"]
    assert [source_rank(s) for s in order] == sorted((source_rank(s) for s in order), reverse=True)
    assert set(SOURCE_RANKS) == {
        "manual",
        "document",
        "live-fetch",
        "consolidation",
        "swap-import",
        "conversation",
    }


def test_defaults() -> None:
    assert DEFAULT_SOURCE == "conversation"
    assert {"manual"} == HUMAN_ONLY_SOURCES


@pytest.mark.parametrize("source", ["", "MANUAL", "web", "manual ", "live_fetch"])
def test_an_unknown_source_is_an_invalid_request_naming_the_known_ones(source: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        source_rank(source)
    assert repr(source) in raised.value.detail
    assert "live-fetch" in raised.value.detail


def test_rank_of_is_the_highest_rank() -> None:
    assert rank_of(["conversation", "document", "swap-import"]) == 40
    assert rank_of(["conversation"]) == 10
    assert rank_of([]) == 0
    with pytest.raises(InvalidRequest):
        rank_of(["conversation", "gossip"])


def test_a_memory_rank_follows_its_provenance() -> None:
    m = memory(provenance=(Provenance("conversation", "a"), Provenance("live-fetch", "b", "url")))
    assert m.rank == 40
    assert m.writers == {"a", "b"}


def test_roles() -> None:
    assert set(ROLES) == {"agent", "member", "auditor", "admin", "owner"}
    assert "auditor" not in WRITER_ROLES
    assert {"admin", "owner"} == REVIEWER_ROLES
    assert REVIEWER_ROLES <= WRITER_ROLES
    assert {"member", "admin", "owner"} == HUMAN_ROLES


@pytest.mark.parametrize(
    ("role", "human"),
    [("agent", False), ("auditor", False), ("member", True), ("admin", True), ("owner", True)],
)
def test_identity_is_human(role: str, human: bool) -> None:
    assert Identity(namespace="acme", actor="x", role=role).is_human is human  # type: ignore[arg-type]


def v(actor: str, supports: bool, days: float = 0) -> Verification:
    return Verification(actor=actor, supports=supports, at=at(days))


@pytest.mark.parametrize(
    ("verifications", "base", "tier"),
    [
        ((), "canonical", "canonical"),
        ((v("b", True),), "canonical", "verified"),
        ((v("b", False),), "canonical", "canonical"),
        ((v("b", True), v("c", False)), "canonical", "canonical"),  # a tie is not verified
        ((v("b", True), v("c", True), v("d", False)), "canonical", "verified"),
        ((v("b", True), v("b", True), v("c", False)), "canonical", "canonical"),  # one word per actor
        ((v("b", True), v("b", False)), "verified", "canonical"),  # the latest word counts
        ((v("b", False), v("b", True)), "canonical", "verified"),
        ((v("b", True),), "candidate", "candidate"),  # quarantined stays candidate
        ((), "verified", "canonical"),
    ],
)
def test_trust_tier_from(verifications: tuple[Verification, ...], base: str, tier: str) -> None:
    assert trust_tier_from(verifications, base, frozenset()) == tier  # type: ignore[arg-type]


def test_verification_is_a_value() -> None:
    assert Verification("b", True, T0) == Verification("b", True, T0)
