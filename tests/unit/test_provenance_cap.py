"""Provenance a key may claim: each key carries the highest source it may assert, set by
whoever made it (an agent's default: ``conversation``). A claim above it is lowered to the cap
and said so (policy ``cap``, the default), or refused (policy ``refuse``)."""

from __future__ import annotations

import msgspec
import pytest

from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, ProvenanceNotAllowed
from memwarden.domain.model.events import KeyIssued
from memwarden.domain.model.keys import IssueKey, decide_issue, evolve_key
from memwarden.domain.model.policies import NamespacePolicy, effective_policy
from memwarden.domain.model.trust import SOURCE_RANKS
from tests.unit.builders import (
    ADMIN,
    AGENT,
    CHATTY_AGENT,
    OWNER,
    POLICY,
    T0,
    cmd,
    decide,
    ident,
    memory,
    write_state,
)

DOCUMENTED = memory(subject="dana", attribute="city", value="Porto", source="document")
CLAIM = cmd("Dana lives in Lisbon", subject="dana", attribute="city", value="Lisbon", source="document")


def test_an_agent_key_made_without_a_cap_claims_at_most_conversation() -> None:
    assert CHATTY_AGENT.provenance_cap == "conversation"
    assert ident("member", max_provenance=None).provenance_cap == "manual"


def test_a_claim_above_the_cap_is_lowered_and_the_decision_says_so() -> None:
    decision = decide(CLAIM, write_state(slot=[DOCUMENTED]), identity=CHATTY_AGENT)
    assert decision.outcome == "disputed"  # as conversation, it cannot outrank the document
    assert decision.provenance_capped == ("document", "conversation")
    written = decision.events[0]
    assert written.provenance[0].source == "conversation"  # type: ignore[attr-defined]


def test_a_claim_within_the_cap_is_taken_as_claimed() -> None:
    decision = decide(CLAIM, write_state(slot=[DOCUMENTED]), identity=AGENT)
    assert decision.outcome == "superseded"
    assert decision.provenance_capped is None


def test_the_policy_may_refuse_a_claim_above_the_cap() -> None:
    refusing = msgspec.structs.replace(POLICY, provenance_over_cap="refuse")
    with pytest.raises(ProvenanceNotAllowed, match="at most 'conversation'"):
        decide(CLAIM, write_state(slot=[DOCUMENTED]), identity=CHATTY_AGENT, policy=refusing)


def test_the_namespace_policy_sets_what_a_claim_above_the_cap_gets() -> None:
    own = {"acme": NamespacePolicy(namespace="acme", provenance_over_cap="refuse")}
    assert effective_policy("acme/eng", own).write_policy(100).provenance_over_cap == "refuse"
    assert effective_policy("acme/eng", {}).write_policy(100) == WritePolicy(max_content_bytes=100)


def _issue(caller_cap: str | None, role: str, cap: str | None) -> KeyIssued:
    caller = msgspec.structs.replace(ADMIN, max_provenance=caller_cap)
    return decide_issue(
        caller, IssueKey(target="acme/eng", actor="ingest", role=role, max_provenance=cap), "a" * 32, "h", T0
    )


def test_a_key_carries_the_cap_it_was_made_with() -> None:
    issued = _issue(None, "agent", "document")
    key = evolve_key(None, issued)
    assert key.identity.provenance_cap == "document"


def test_a_key_made_before_keys_carried_a_cap_gets_its_roles_default() -> None:
    old = KeyIssued(
        key_id="b" * 32, key_hash="h", namespace="acme", actor="bot", role="agent", issued_by="x", at=T0
    )
    assert evolve_key(None, old).identity.provenance_cap == "conversation"


@pytest.mark.parametrize(
    ("role", "cap", "error"), [("agent", "scripture", InvalidRequest), ("agent", "manual", InvalidRequest)]
)
def test_a_cap_must_be_a_source_a_key_of_that_role_may_hold(
    role: str, cap: str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _issue(None, role, cap)


def test_no_key_may_grant_more_than_its_maker_may_claim() -> None:
    with pytest.raises(Forbidden, match="may not grant"):
        _issue("document", "member", "manual")
    assert _issue("document", "agent", "live-fetch").max_provenance == "live-fetch"
    assert OWNER.provenance_cap == "manual"
    assert sorted(SOURCE_RANKS, key=SOURCE_RANKS.__getitem__)[0] == "conversation"
