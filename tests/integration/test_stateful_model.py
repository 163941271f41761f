"""A stateful model test: the services against a plain in-memory model of the rules.

Hypothesis drives writes (plain and slotted, with sources of different trust ranks and
validity dates, so dedupe, succession, correction and disputes all happen), dispute
resolutions, verifications (by another actor, and refused to the writer), erasures and
key revocations through the services, as an authenticated key would (the key decides
who acts; a revoked key acts no more). The model below is written from docs/architecture.md §3-§8,
not from the deciders. After every step, for an agent of a namespace, of its child and of
an outsider, ``read``, ``history``, ``search`` and the as-of answer at the current time
must agree with the model: what is visible, its status, trust tier and content (null
once erased).

Each example runs in a tenant of its own on one database, so examples never meet.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import hypothesis
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.model.commands import ProvenanceClaim, ResolveDispute, VerifyMemory, WriteMemory
from memwarden.domain.model.erasure import Forget
from memwarden.domain.model.errors import DomainError, Forbidden, InvalidState, NotFound, ProvenanceNotAllowed
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.model.trust import SOURCE_RANKS
from memwarden.domain.settings import Settings
from memwarden.projections.search.service import MAX_TOKEN_BUDGET, SearchQuery
from memwarden.projections.timeline.service import AsOfQuestion

STEPS_PER_EXAMPLE = 30
EXAMPLES = 20
MIN_STEPS = 200
"""20 examples of up to 30 steps: at least 200 steps in CI (the run asserts it), in about 30 s."""
RARE_RULE_LIMIT = 3
"""Erasing a whole chain, or being refused, teaches little after a few times an example."""

SOURCES = ("conversation", "document", "manual")
VALID_FROM = (None, datetime(2020, 1, 1, tzinfo=UTC), datetime(2021, 1, 1, tzinfo=UTC))
"""None: the write's own time (later than both dates), so a write can be a succession
(later) or a correction (not later) of what it contradicts."""
WORD = "fleet"
"""Every fact says it, so one lexical search finds every current fact a caller may see."""


@dataclass(frozen=True)
class Fact:
    content: str
    subject: str | None = None
    attribute: str | None = None
    value: str | None = None

    @property
    def slot(self) -> tuple[str, str] | None:
        return None if self.subject is None or self.attribute is None else (self.subject, self.attribute)


FACTS = (
    Fact(f"The {WORD} builds run on the alpha runner pool"),
    Fact(f"The {WORD} alerts page the platform rota first"),
    *(
        Fact(f"The {WORD} database {attribute} is {value}", "fleet-db", attribute, value)
        for attribute in ("host", "region")
        for value in ("north", "south", "east")
    ),
)
"""Text and slot value go together, so equal text always means the same slot and value."""


# -- the model ----------------------------------------------------------------------------------


@dataclass
class Memory:
    id: UUID
    namespace: str
    fact: Fact
    order: int
    """When it was written, as a step number (the ledger's own times rise with it)."""
    valid_from: tuple[int, Any]
    status: str
    tier: str
    sources: set[str]
    writers: set[str]
    verifications: dict[str, bool] = field(default_factory=dict)
    closed: bool = False
    """A later fact succeeded it: still believed, no longer valid now."""
    supersedes: set[UUID] = field(default_factory=set)
    superseded_by: set[UUID] = field(default_factory=set)
    kept: UUID | None = None
    """Rejected in review (``keep_old``): the memory kept instead, a step of its history."""
    hidden: bool = False
    """Erased while quarantined: nobody could read it, so nobody reads its tombstone (§7)."""

    def history_links(self) -> set[UUID]:
        return self.superseded_by | ({self.kept} if self.kept else set())

    @property
    def rank(self) -> int:
        return max(SOURCE_RANKS[s] for s in self.sources)

    @property
    def current(self) -> bool:
        return self.status == "active" and not self.closed

    def independent_tier(self) -> str:
        """Verified when independent supports outnumber refutations (docs/architecture.md §4)."""
        words = [supports for actor, supports in self.verifications.items() if actor not in self.writers]
        return "verified" if sum(words) > len(words) - sum(words) else "canonical"


@dataclass
class Dispute:
    id: UUID
    new: UUID
    incumbent: UUID
    open: bool = True


Expected = tuple[str, UUID | None] | type[DomainError]
"""A write's outcome and memory id (None: a new one), or the error it must raise."""


class Model:
    """docs/architecture.md §3-§8 for one tenant, in plain Python."""

    def __init__(self) -> None:
        self.memories: dict[UUID, Memory] = {}
        self.disputes: dict[UUID, Dispute] = {}
        self.step = 0

    def in_namespace(self, namespace: str) -> list[Memory]:
        return [m for m in self.memories.values() if m.namespace == namespace]

    # writes (§4 steps 5-6)

    def duplicates(self, namespace: str, fact: Fact) -> list[Memory]:
        return [m for m in self.in_namespace(namespace) if m.current and m.fact.content == fact.content]

    def contradicted(self, namespace: str, slot: tuple[str, str] | None, value: str | None) -> list[Memory]:
        if slot is None:
            return []
        return [
            m
            for m in self.in_namespace(namespace)
            if m.current and m.fact.slot == slot and m.fact.value != value
        ]

    def expect_write(self, who: Identity, fact: Fact, source: str) -> Expected:
        if source == "manual" and not who.is_human:
            return ProvenanceNotAllowed
        if self.duplicates(who.namespace, fact):
            return ("deduplicated", None)
        incumbents = self.contradicted(who.namespace, fact.slot, fact.value)
        top = max(incumbents, key=lambda m: (m.rank, m.order), default=None)
        if top is not None and SOURCE_RANKS[source] < top.rank:
            return ("disputed", None)
        return ("superseded" if incumbents else "stored", None)

    def deduplicate(self, memory_id: UUID, who: Identity, source: str) -> None:
        memory = self.memories[memory_id]
        memory.sources.add(source)
        memory.writers.add(who.actor)
        memory.tier = memory.independent_tier()

    def add(
        self, memory_id: UUID, who: Identity, fact: Fact, source: str, valid_from: datetime | None
    ) -> Memory:
        self.step += 1
        memory = Memory(
            id=memory_id,
            namespace=who.namespace,
            fact=fact,
            order=self.step,
            valid_from=(1, self.step) if valid_from is None else (0, valid_from),
            status="active",
            tier="canonical",
            sources={source},
            writers={who.actor},
        )
        self.memories[memory_id] = memory
        return memory

    def store(self, new: Memory) -> None:
        for old in self.contradicted(new.namespace, new.fact.slot, new.fact.value):
            if old.id != new.id:
                self.supersede(old, new)

    def quarantine(self, new: Memory, dispute_id: UUID) -> None:
        incumbents = self.contradicted(new.namespace, new.fact.slot, new.fact.value)
        top = max(incumbents, key=lambda m: (m.rank, m.order))
        new.status, new.tier = "disputed", "candidate"
        self.disputes[dispute_id] = Dispute(dispute_id, new.id, top.id)

    def supersede(self, old: Memory, new: Memory) -> None:
        """Succession when the new fact holds from later on (§3), else a correction."""
        if new.valid_from > old.valid_from:
            old.closed = True
        else:
            old.status = "retired"
        old.superseded_by.add(new.id)
        new.supersedes.add(old.id)

    # disputes (§4), verification (§4), erasure (§8)

    def resolve(self, dispute: Dispute, decision: str) -> type[DomainError] | None:
        new, incumbent = self.memories[dispute.new], self.memories[dispute.incumbent]
        if not dispute.open or "erased" in (new.status, incumbent.status):
            return InvalidState
        dispute.open = False
        if decision == "keep_old":
            new.status, new.kept = "retired", incumbent.id
            return None
        displaced = self.contradicted(new.namespace, new.fact.slot, new.fact.value)
        if decision == "uphold_new":
            if incumbent.current and incumbent not in displaced:
                displaced.append(incumbent)
            for old in displaced:
                self.supersede(old, new)
        new.status, new.tier = "active", "canonical"
        return None

    def verify(self, who: Identity, memory: Memory, supports: bool) -> type[DomainError] | None:
        if not self.visible(who, memory):
            return NotFound
        if who.actor in memory.writers:
            return Forbidden
        if memory.status != "active":
            return InvalidState
        memory.verifications[who.actor] = supports
        memory.tier = memory.independent_tier()
        return None

    def chain(self, memory_id: UUID) -> set[UUID]:
        """Every version a history lists: linked to the memory by supersedence, both
        directions, or by a review's rejection (``kept``), both directions."""
        found: set[UUID] = set()
        pending = [memory_id]
        while pending:
            memory = self.memories[pending.pop()]
            if memory.id not in found:
                found.add(memory.id)
                pending.extend(memory.supersedes | memory.superseded_by)
                pending.extend(m.id for m in self.memories.values() if m.kept == memory.id)
                pending.extend([memory.kept] if memory.kept else [])
        return found

    def forget(self, memory_id: UUID) -> set[UUID]:
        """Every version the memory's history lists is erased with it (§8)."""
        erased = {i for i in self.chain(memory_id) if self.memories[i].status != "erased"}
        for i in erased:
            memory = self.memories[i]
            memory.hidden = memory.status == "disputed"
            memory.status = "erased"
        return erased

    # what a reader sees (§7)

    def visible(self, reader: Identity, memory: Memory) -> bool:
        """In the reader's scope (its namespace and ancestors), and neither quarantined nor
        the tombstone of a memory erased while quarantined (denied and missing look the same)."""
        in_scope = memory.namespace in ancestors(reader.namespace)
        return in_scope and memory.status != "disputed" and not memory.hidden

    def current_for(self, reader: Identity) -> dict[UUID, Memory]:
        return {m.id: m for m in self.memories.values() if m.current and self.visible(reader, m)}


# -- the machine --------------------------------------------------------------------------------

TENANTS = itertools.count()
TALLY: Counter[str] = Counter()
"""What the run did (steps, outcomes, refusals), so a run that exercised nothing shows it."""


class Actor:
    def __init__(self, identity: Identity, key_id: str, key: str) -> None:
        self.identity = identity
        self.key_id = key_id
        self.key = key
        self.revoked = False


class ServicesAgainstModel(RuleBasedStateMachine):
    def __init__(self, runtime: Runtime) -> None:
        super().__init__()
        self.runtime = runtime
        tenant = f"st{next(TENANTS)}x{uuid4().hex[:6]}"
        self.parent, self.child, self.outsider = f"{tenant}/eng", f"{tenant}/eng/platform", f"{tenant}/sales"
        self.readers = [Identity(ns, "reader", "agent") for ns in (self.parent, self.child, self.outsider)]
        governance = self.runtime.core.governance
        operator = Identity(tenant, "operator", "owner")

        def actor(namespace: str, name: str, role: str) -> Actor:
            # the model's agents may claim every source but manual: their keys are capped at document
            cap = "document" if role == "agent" else None
            command = IssueKey(target=namespace, actor=name, role=role, max_provenance=cap)
            issued = governance.issue_key(operator, command)
            return Actor(Identity(namespace, name, role, cap), issued.key_id, issued.key)  # type: ignore[arg-type]

        self.writers = [
            actor(ns, name, role)
            for ns in (self.parent, self.child)
            for name, role in (("agent-a", "agent"), ("agent-b", "agent"), ("member-m", "member"))
        ]
        self.writers.append(actor(self.outsider, "agent-o", "agent"))
        self.reviewer = actor(tenant, "lead", "admin")
        self.model = Model()
        self.position = 0
        self.done: Counter[str] = Counter()
        TALLY["examples"] += 1

    # -- acting as a key ----------------------------------------------------------------------

    def authenticated(self, actor: Actor) -> Identity | None:
        """Who the key says acts (None for a revoked key, which must act no more)."""
        state = self.runtime.core.governance.authenticate(actor.key)
        assert (state is None) == actor.revoked
        if state is None:
            return None
        assert state.identity == actor.identity
        return state.identity

    def saw(self, position: int) -> None:
        self.position = max(self.position, position)

    def tally(self, what: str) -> None:
        TALLY[what] += 1
        self.done[what] += 1

    # -- rules ----------------------------------------------------------------------------------

    @initialize()
    def manual_facts(self) -> None:
        """A manual fact in each writing namespace: agents contradicting it open disputes."""
        for member in (2, 5):
            self.write(member, FACTS[2], "manual", None)

    @rule(
        actor=st.sampled_from(range(7)),
        fact=st.sampled_from(FACTS),
        source=st.sampled_from(SOURCES),
        valid_from=st.sampled_from(VALID_FROM),
    )
    def write(self, actor: int, fact: Fact, source: str, valid_from: datetime | None) -> None:
        who = self.authenticated(self.writers[actor])
        if who is None:
            self.tally("write by a revoked key")
            return
        expected = self.model.expect_write(who, fact, source)
        command = WriteMemory(
            content=fact.content,
            subject=fact.subject,
            attribute=fact.attribute,
            value=fact.value,
            provenance=ProvenanceClaim(source=source),
            valid_from=valid_from,
        )
        if not isinstance(expected, tuple):
            with pytest.raises(expected):
                self.runtime.memory.write(who, command)
            self.tally(f"write refused: {expected.__name__}")
            return
        result = self.runtime.memory.write(who, command)
        self.saw(result.position)
        assert result.outcome == expected[0], (result, expected)
        self.tally(f"write {result.outcome}")
        assert result.id is not None
        if result.outcome == "deduplicated":
            assert result.id in {m.id for m in self.model.duplicates(who.namespace, fact)}
            self.model.deduplicate(result.id, who, source)
            return
        new = self.model.add(result.id, who, fact, source, valid_from)
        if result.outcome == "disputed":
            assert result.dispute_id is not None
            self.model.quarantine(new, result.dispute_id)
            return
        superseded = {m.id for m in self.model.contradicted(who.namespace, fact.slot, fact.value)} - {new.id}
        assert set(result.supersedes) == superseded
        self.model.store(new)

    @rule(
        actor=st.sampled_from(range(6)),
        attribute=st.sampled_from(("host", "region")),
        source=st.sampled_from(SOURCES),
        valid_from=st.sampled_from(VALID_FROM),
        data=st.data(),
    )
    def contradict(
        self, actor: int, attribute: str, source: str, valid_from: datetime | None, data: st.DataObject
    ) -> None:
        """A slotted write with another value than the slot's holder: supersedence or a dispute."""
        namespace = self.writers[actor].identity.namespace
        held = {
            m.fact.value
            for m in self.model.in_namespace(namespace)
            if m.current and m.fact.attribute == attribute
        }
        others = [f for f in FACTS if f.attribute == attribute and f.value not in held]
        self.write(actor, data.draw(st.sampled_from(others or list(FACTS))), source, valid_from)

    @precondition(lambda self: self.model.disputes)
    @rule(data=st.data(), decision=st.sampled_from(("uphold_new", "keep_old", "both_valid")))
    def resolve(self, data: st.DataObject, decision: str) -> None:
        open_first = sorted(self.model.disputes.values(), key=lambda d: not d.open)  # stable sort
        dispute = data.draw(st.sampled_from(open_first))
        who = self.authenticated(self.reviewer)
        assert who is not None
        command = ResolveDispute(dispute_id=dispute.id, decision=decision)  # type: ignore[arg-type]
        refused = self.model.resolve(dispute, decision)
        if refused is not None:
            with pytest.raises(refused):
                self.runtime.memory.resolve_dispute(who, command)
            self.tally(f"resolve {decision} refused")
            return
        self.saw(self.runtime.memory.resolve_dispute(who, command).position)
        self.tally(f"resolve {decision}")

    @precondition(lambda self: self.model.memories)
    @rule(data=st.data(), verifier=st.sampled_from(range(7)), supports=st.booleans())
    def verify(self, data: st.DataObject, verifier: int, supports: bool) -> None:
        memory = self.model.memories[data.draw(st.sampled_from(list(self.model.memories)))]
        who = self.authenticated(self.writers[verifier])
        if who is None:
            return
        command = VerifyMemory(memory_id=memory.id, supports=supports)
        refused = self.model.verify(who, memory, supports)
        if refused is not None:
            with pytest.raises(refused):
                self.runtime.memory.verify(who, command)
            self.tally(f"verify refused: {refused.__name__}")
            return
        result = self.runtime.memory.verify(who, command)
        self.saw(result.position)
        assert result.trust_tier == memory.tier
        self.tally(f"verify -> {result.trust_tier}")

    @precondition(lambda self: self.model.memories and self.done["verify own write"] < RARE_RULE_LIMIT)
    @rule(data=st.data())
    def verify_own_write(self, data: st.DataObject) -> None:
        """Refused: an actor cannot verify what it wrote (§4)."""
        memory = self.model.memories[data.draw(st.sampled_from(list(self.model.memories)))]
        own = [w for w in self.writers if w.identity.actor in memory.writers and not w.revoked]
        own = [w for w in own if w.identity.namespace == memory.namespace]
        if not own or not self.model.visible(own[0].identity, memory):
            return
        who = self.authenticated(own[0])
        assert who is not None
        with pytest.raises(Forbidden):
            self.runtime.memory.verify(who, VerifyMemory(memory_id=memory.id, supports=True))
        self.tally("verify own write")

    @precondition(lambda self: len(self.model.memories) >= 4 and self.done["forget"] < RARE_RULE_LIMIT)
    @rule(data=st.data())
    def forget(self, data: st.DataObject) -> None:
        memory_id = data.draw(st.sampled_from(list(self.model.memories)))
        command = Forget(ids=(memory_id,), reason="model test")
        agent = self.authenticated(self.writers[0])
        if agent is not None:  # erasure is for admins and owners (§8)
            with pytest.raises(Forbidden):
                self.runtime.core.erasure.forget(agent, command)
        who = self.authenticated(self.reviewer)
        assert who is not None
        expected = self.model.forget(memory_id)
        result = self.runtime.core.erasure.forget(who, command)
        self.saw(result.position)
        assert set(result.certificate.erased_ids) == expected
        assert result.erased == len(expected)
        self.tally("forget")

    @precondition(lambda self: not any(w.revoked for w in self.writers))
    @rule(actor=st.sampled_from(range(7)))
    def revoke(self, actor: int) -> None:
        target = self.writers[actor]
        if target.revoked:
            return
        who = self.authenticated(self.reviewer)
        assert who is not None
        self.saw(self.runtime.core.governance.revoke_key(who, target.key_id))
        target.revoked = True
        self.tally("revoke")

    # -- what every reader sees -------------------------------------------------------------------

    @invariant()
    def reads_agree(self) -> None:
        self.tally("checks")
        for reader in self.readers:
            for memory in self.model.memories.values():
                self.check_read(reader, memory)
                self.check_history(reader, memory)

    @invariant()
    def search_and_as_of_agree(self) -> None:
        reads = self.runtime.reads
        for reader in self.readers:
            expected = self.model.current_for(reader)
            query = SearchQuery(query=WORD, k=100, token_budget=MAX_TOKEN_BUDGET)
            found = reads.search.search(reader, query, None, after=self.position).results
            assert {r.id: (r.content, r.status, r.trust_tier) for r in found} == {
                m.id: (m.fact.content, m.status, m.tier) for m in expected.values()
            }, reader
            as_of = reads.time_travel.sql(AsOfQuestion(scope=ancestors(reader.namespace)))
            assert {m.id: (m.content, m.status, m.trust_tier) for m in as_of.memories} == {
                m.id: (m.fact.content, m.status, m.tier) for m in expected.values()
            }, reader

    def check_read(self, reader: Identity, memory: Memory) -> None:
        view = self.runtime.reads.read(reader, memory.id, after=self.position)
        now = self.runtime.reads.time_travel.read(ancestors(reader.namespace), memory.id, None, None)
        if not self.model.visible(reader, memory):
            assert view is None, (reader, memory, view)
            assert now is None, (reader, memory, now)
            return
        assert view is not None, (reader, memory)
        assert now is not None, (reader, memory)
        erased = memory.status == "erased"
        assert (now.status, now.content) == (memory.status, None if erased else memory.fact.content)
        assert (view.status, view.content) == (memory.status, None if erased else memory.fact.content)
        assert (view.retired_at is not None) == (memory.status in ("retired", "erased")), (memory, view)
        assert (view.valid_to is not None) == memory.closed, (memory, view)
        if not erased:
            assert view.trust_tier == memory.tier, (memory, view)
            assert set(view.superseded_by) == memory.superseded_by
            assert set(view.supersedes) == memory.supersedes

    def check_history(self, reader: Identity, memory: Memory) -> None:
        steps = self.runtime.reads.history(reader, memory.id, after=self.position)
        if not self.model.visible(reader, memory):
            assert steps is None, (reader, memory, steps)
            return
        assert steps is not None, (reader, memory)
        chain = [self.model.memories[i] for i in self.model.chain(memory.id)]
        shown = [m for m in chain if self.model.visible(reader, m)]
        assert {s.id for s in steps} == {m.id for m in shown}
        edges = {(s.id, s.superseded_by) for s in steps if s.superseded_by is not None}
        assert edges == {(m.id, by) for m in shown for by in m.history_links()}
        for step in steps:
            version = self.model.memories[step.id]
            erased = version.status == "erased"
            assert (step.status, step.content) == (
                version.status,
                None if erased else version.fact.content,
            )

    def teardown(self) -> None:
        """The ledger replay gives the projection's as-of answer (§3), for the last state."""
        for reader in self.readers:
            check = self.runtime.reads.time_travel.verify(AsOfQuestion(scope=ancestors(reader.namespace)))
            assert check.ok, check.differences


@pytest.fixture
def runtime(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    monkeypatch.setenv("MEMWARDEN_EMBEDDER", "hash")  # meaning is not modelled; speed is wanted
    with Runtime(settings, follow=True) as opened:
        yield opened


def test_services_agree_with_the_model_after_every_step(runtime: Runtime) -> None:
    run_state_machine_as_test(
        lambda: ServicesAgainstModel(runtime),
        settings=hypothesis.settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS_PER_EXAMPLE,
            deadline=None,
            # no shrinking: the unshrunk steps are readable, and shrinking takes minutes
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            suppress_health_check=list(hypothesis.HealthCheck),
        ),
    )
    print(dict(TALLY))
    steps = TALLY["checks"] - TALLY["examples"]  # checked after the initial writes, then after each step
    print(f"{steps} steps in {TALLY['examples']} examples")
    assert steps >= MIN_STEPS
