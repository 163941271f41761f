"""Consolidation's rules (docs/architecture.md section 6): clusters of a namespace's memories, the
proposals drafted from them, and a reviewer's answer to each. Pure: memory states, their
near-duplicate pairs, ``now`` and the lease token in; events out.

A cluster is a set of memories of one namespace that say one thing, or are needed
together: near-duplicates (cosine >= ``DUPLICATE_COSINE``, joined transitively), a slot's
history (every version of one ``subject``/``attribute``), facts faulted together (returned
together by at least ``MIN_FAULTED_TOGETHER`` faults), and fault near-misses (a memory that
nearly answered a fault, the best L2 candidate of a fault answered by L3 or missed, with its
neighbours at cosine >= ``NEAR_MISS_COSINE``: split statements that one would answer). Its
proposal's id is derived from its kind and members, so a cluster is proposed once however
often the pass runs; a cluster that grows is a new one. The built-in drafter is
extractive: the member of highest trust, then the newest. An optional model drafter
(``Drafter``) words the statement itself; its text is held to the rules of caller text
(``drafted_text_problem``), and whatever goes wrong with it falls back to the extractive
choice, the reason recorded on the draft.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from itertools import combinations
from typing import Literal, Protocol
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec
from msgspec.structs import replace

from memwarden.domain.model.autopilot import check_reviewer
from memwarden.domain.model.errors import InvalidRequest, InvalidState
from memwarden.domain.model.events import (
    ContextFaulted,
    Event,
    ProposalApproved,
    ProposalDrafted,
    ProposalEdited,
    ProposalKind,
    ProposalRejected,
    ProposalTextDrafted,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import invisible_character, is_low_information, storable_text_problem

CONSOLIDATION = "consolidation"
"""The pass's name (its leases) and the provenance of what approval publishes."""
EXTRACTIVE = "extractive"
DUPLICATE_COSINE = 0.9
NEAR_MISS_COSINE = 0.75
MIN_FAULTED_TOGETHER = 2
NEIGHBOURS_K = 8
MAX_PROPOSAL_CHARS = 8_000

ProposalStatus = Literal["pending_review", "approved", "rejected"]


class Cluster(msgspec.Struct, frozen=True, kw_only=True):
    kind: ProposalKind
    members: tuple[UUID, ...]
    """Sorted: the cluster's identity."""


def proposal_stream(namespace: str, cluster: Cluster) -> UUID:
    members = ",".join(str(m) for m in cluster.members)
    return uuid5(NAMESPACE_URL, f"memwarden:proposal:{namespace}:{cluster.kind}:{members}")


class Links(msgspec.Struct, frozen=True, kw_only=True):
    """The pairs a pass found between memories, by what links them (each joined
    transitively into clusters of its kind)."""

    duplicates: tuple[tuple[UUID, UUID], ...] = ()
    together: tuple[tuple[UUID, UUID], ...] = ()
    near_misses: tuple[tuple[UUID, UUID], ...] = ()


def find_clusters(
    namespace: str, memories: Sequence[MemoryState], links: Links, now: datetime
) -> list[Cluster]:
    """The clusters among ``memories`` of ``namespace`` (erased ones, and those of other
    namespaces, aside): slots with two or more versions, and groups of current memories
    linked as near-duplicates, as faulted together, or by a near-miss (pairs naming a
    memory not among them are ignored)."""
    known = {
        m.id: m
        for m in memories
        if m.namespace == namespace and m.status != "erased" and m.content is not None
    }
    slots: dict[tuple[str, str], list[UUID]] = {}
    for m in known.values():
        if m.subject is not None and m.attribute is not None:
            slots.setdefault((m.subject, m.attribute), []).append(m.id)
    clusters = [
        Cluster(kind="slot_history", members=tuple(sorted(ids, key=str)))
        for ids in slots.values()
        if len(ids) > 1
    ]
    current = {i for i, m in known.items() if m.is_current(now)}
    kinds: tuple[tuple[ProposalKind, tuple[tuple[UUID, UUID], ...]], ...] = (
        ("near_duplicate", links.duplicates),
        ("faulted_together", links.together),
        ("fault_near_miss", links.near_misses),
    )
    for kind, pairs in kinds:
        groups = _joined((a, b) for a, b in pairs if a in current and b in current and a != b)
        clusters.extend(Cluster(kind=kind, members=g) for g in groups)
    return sorted(clusters, key=lambda c: (c.kind, [str(m) for m in c.members]))


def faulted_together(faults: Iterable[ContextFaulted]) -> tuple[tuple[UUID, UUID], ...]:
    """Pairs of memories answering the same fault (an L2 answer) at least
    ``MIN_FAULTED_TOGETHER`` times."""
    counts: Counter[tuple[UUID, UUID]] = Counter()
    for fault in faults:
        if fault.tier == "L2":
            refs = sorted(set(fault.refs), key=str)
            counts.update(combinations(refs, 2))
    return tuple(sorted((p for p, n in counts.items() if n >= MIN_FAULTED_TOGETHER), key=str))


def near_missed(faults: Iterable[ContextFaulted]) -> list[UUID]:
    """The memories that nearly answered a fault: the best L2 candidate of a fault that L2
    did not answer."""
    found = [f.best_candidate for f in faults if f.tier != "L2" and f.best_candidate is not None]
    return list(dict.fromkeys(found))


def _joined(pairs: Iterable[tuple[UUID, UUID]]) -> list[tuple[UUID, ...]]:
    """Connected groups of the pairs (union-find), each sorted."""
    parent: dict[UUID, UUID] = {}

    def root(x: UUID) -> UUID:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
    groups: dict[UUID, list[UUID]] = {}
    for x in list(parent):
        groups.setdefault(root(x), []).append(x)
    return [tuple(sorted(g, key=str)) for g in groups.values()]


def _preference(m: MemoryState) -> tuple[int, datetime, str]:
    return (m.rank, m.recorded_at, str(m.id))


def extractive_choice(members: Sequence[MemoryState]) -> MemoryState:
    """The built-in drafter: the member of highest trust rank, then the newest."""
    return max(members, key=_preference)


def ranked(members: Sequence[MemoryState]) -> list[MemoryState]:
    """The members best first, as the extractive drafter prefers them."""
    return sorted(members, key=_preference, reverse=True)


class DraftFailed(Exception):
    """A model drafter gave no statement; ``reason`` says why in a word (``timeout``,
    ``bad_answer`` ...): what the draft records as its ``fallback``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class Drafter(Protocol):
    """A model that words one canonical statement for a cluster from its members' texts
    (``DraftFailed`` when it cannot)."""

    name: str

    def draft(self, kind: ProposalKind, statements: Sequence[str]) -> str: ...


class Wording(msgspec.Struct, frozen=True, kw_only=True):
    """What the model drafter made of one cluster: its statement (``content``), or why it
    made none (``fallback``) so the extractive choice stands."""

    drafter: str
    content: str | None = None
    fallback: str | None = None


def drafted_text_problem(text: str) -> str | None:
    """Why a model's statement cannot be a proposal's text, in a word, or None: the rules of
    caller text (storable, nothing invisible, not blank, not low-information, at most
    ``MAX_PROPOSAL_CHARS``). The reason never quotes the text."""
    if storable_text_problem(text) is not None:
        return "unstorable_text"
    if invisible_character(text) is not None:
        return "invisible_character"
    if not text.strip() or is_low_information(text):
        return "low_information"
    if len(text) > MAX_PROPOSAL_CHARS:
        return "too_long"
    return None


def worded(drafter: str, text: str) -> Wording:
    """``text`` as the drafter's wording once it passes ``drafted_text_problem`` (trimmed),
    else the fallback that says why not."""
    problem = drafted_text_problem(text.strip())
    if problem is not None:
        return Wording(drafter=drafter, fallback=problem)
    return Wording(drafter=drafter, content=text.strip())


def new_clusters(
    namespace: str, clusters: Sequence[Cluster], states: Mapping[UUID, MemoryState], proposed: set[UUID]
) -> list[tuple[UUID, Cluster, list[MemoryState]]]:
    """The clusters to draft: not yet ``proposed`` (their stream exists), two members or
    more known; each with its proposal id and members."""
    found = []
    for cluster in clusters:
        proposal_id = proposal_stream(namespace, cluster)
        members = [states[m] for m in cluster.members if m in states]
        if proposal_id not in proposed and len(members) >= 2:
            found.append((proposal_id, cluster, members))
    return found


def decide_drafts(
    namespace: str,
    clusters: Sequence[Cluster],
    states: Mapping[UUID, MemoryState],
    proposed: set[UUID],
    token: int,
    now: datetime,
    wordings: Mapping[UUID, Wording] | None = None,
) -> list[ProposalDrafted | ProposalTextDrafted]:
    """A draft per cluster not yet ``proposed``; with the model drafter's ``wordings`` (by
    proposal id), its statement follows the draft, or the draft records its fallback."""
    events: list[ProposalDrafted | ProposalTextDrafted] = []
    for proposal_id, cluster, members in new_clusters(namespace, clusters, states, proposed):
        wording = (wordings or {}).get(proposal_id)
        text = wording.content if wording is not None else None
        events.append(
            ProposalDrafted(
                proposal_id=proposal_id,
                namespace=namespace,
                kind=cluster.kind,
                sources=cluster.members,
                canonical=extractive_choice(members).id,
                drafter=wording.drafter if wording is not None and text is not None else EXTRACTIVE,
                token=token,
                fallback=wording.fallback if wording is not None else None,
                at=now,
            )
        )
        if wording is not None and text is not None:
            events.append(
                ProposalTextDrafted(proposal_id=proposal_id, drafter=wording.drafter, content=text, at=now)
            )
    return events


# -- proposals -------------------------------------------------------------------------------


class ProposalState(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    namespace: str
    kind: ProposalKind
    sources: tuple[UUID, ...]
    canonical: UUID
    drafter: str
    drafted_at: datetime
    fallback: str | None = None
    drafted_content: str | None = None
    """A model drafter's statement ("" once erased with one of the sources)."""
    edited_content: str | None = None
    status: ProposalStatus = "pending_review"
    reviewer: str | None = None
    document_id: UUID | None = None
    document_version: int | None = None
    reviewed_at: datetime | None = None
    version: int = 0


def evolve_proposal(state: ProposalState | None, event: Event) -> ProposalState:
    if isinstance(event, ProposalDrafted):
        return ProposalState(
            id=event.proposal_id,
            namespace=event.namespace,
            kind=event.kind,
            sources=event.sources,
            canonical=event.canonical,
            drafter=event.drafter,
            drafted_at=event.at,
            fallback=event.fallback,
            version=1,
        )
    if state is None:
        msg = f"{type(event).__name__} before its proposal"
        raise TypeError(msg)
    if isinstance(event, ProposalTextDrafted):
        return replace(state, drafted_content=event.content, version=state.version + 1)
    if isinstance(event, ProposalEdited):
        return replace(
            state, edited_content=event.content, reviewer=event.reviewer, version=state.version + 1
        )
    if isinstance(event, ProposalApproved):
        return replace(
            state,
            status="approved",
            reviewer=event.reviewer,
            document_id=event.document_id,
            document_version=event.version,
            reviewed_at=event.at,
            version=state.version + 1,
        )
    if isinstance(event, ProposalRejected):
        return replace(
            state, status="rejected", reviewer=event.reviewer, reviewed_at=event.at, version=state.version + 1
        )
    msg = f"not a proposal event: {type(event).__name__}"
    raise TypeError(msg)


def proposal_content(state: ProposalState, canonical: MemoryState | None) -> str | None:
    """The statement to publish: the reviewer's edit, else the model drafter's statement,
    else the chosen memory's text (None once what it would be was erased)."""
    if state.edited_content is not None:
        return state.edited_content or None  # empty: shredded with an erased source
    if state.drafted_content is not None:
        return state.drafted_content or None
    return canonical.content if canonical is not None and canonical.status != "erased" else None


def draws_on(state: ProposalState) -> frozenset[UUID]:
    """The memories whose text the proposal may hold: every source once a reviewer edited
    it or a model worded it, else the one the extractive draft chose."""
    if state.edited_content is not None or state.drafted_content is not None:
        return frozenset(state.sources)
    return frozenset((state.canonical,))


def _pending(reviewer: Identity, state: ProposalState | None) -> ProposalState:
    check_reviewer(reviewer, state.namespace if state else None, "proposal")
    assert state is not None
    if state.status != "pending_review":
        raise InvalidState(f"proposal already {state.status}")
    if state.edited_content == "":  # an edit is never blank: its key was destroyed
        raise InvalidState("the proposal's edit was erased with one of its sources")
    if state.drafted_content == "":  # so was the model's statement
        raise InvalidState("the proposal's drafted text was erased with one of its sources")
    return state


def decide_edit(
    reviewer: Identity, state: ProposalState | None, content: str, now: datetime
) -> ProposalEdited:
    pending = _pending(reviewer, state)
    check_storable(content, "content:")
    if not content.strip():
        raise InvalidRequest("content must not be blank")
    if len(content) > MAX_PROPOSAL_CHARS:
        raise InvalidRequest(f"content is longer than {MAX_PROPOSAL_CHARS} characters")
    return ProposalEdited(proposal_id=pending.id, reviewer=reviewer.actor, content=content, at=now)


def decide_reject(reviewer: Identity, state: ProposalState | None, now: datetime) -> ProposalRejected:
    pending = _pending(reviewer, state)
    return ProposalRejected(proposal_id=pending.id, reviewer=reviewer.actor, at=now)


def check_approvable(reviewer: Identity, state: ProposalState | None, content: str | None) -> str:
    """The text approval will publish; refused when the proposal is not pending or its
    draft's memory was erased (edit it first)."""
    _pending(reviewer, state)
    if content is None:
        raise InvalidState("the drafted memory was erased; edit the proposal to approve it")
    return content


def knowledge_document(state: ProposalState, content: str) -> tuple[str, str]:
    """The L3 document approval publishes, and its file name (its provenance)."""
    slug = f"consolidated-{str(state.id)[:8]}"
    title = f"Consolidated {state.kind.replace('_', ' ')}"
    text = f"---\ntitle: {title}\nslug: {slug}\n---\n{content}\n"
    return text, f"{CONSOLIDATION}/{state.id}.md"


def decide_approved(
    reviewer: Identity, state: ProposalState, document_id: UUID, version: int, now: datetime
) -> ProposalApproved:
    return ProposalApproved(
        proposal_id=state.id, reviewer=reviewer.actor, document_id=document_id, version=version, at=now
    )
