"""The forget decider (docs/architecture.md section 8): who may erase what, downward only.

Pure: the service finds candidate memories and knowledge documents and loads their
authoritative state; this module decides which of them are erased, refuses anything outside
the caller's subtree and returns the MemoryErased and KnowledgeErased events and the
(unsigned) deletion certificate.

Knowledge documents are erased by a ``subtree`` erasure (every document inside it) or by an
``ids`` erasure naming them, and only by a caller who may erase others' writes (an admin or
owner): a document is nobody's own write. A ``subject`` erasure leaves documents alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.model.certificates import DeletionCertificate, TargetKind, subject_digest
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, NotFound, OutsideSubtree
from memwarden.domain.model.events import KnowledgeErased, MemoryErased
from memwarden.domain.model.identity import REVIEWER_ROLES, Identity
from memwarden.domain.model.knowledge import KnowledgeState
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.namespaces import ancestors, is_within, validate_namespace
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import normalize_key

MAX_FORGET_IDS = 100_000
MAX_REASON_LENGTH = 1_000
MAX_SUBJECT_LENGTH = 512


class Forget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Erase by ``ids``, by data ``subject``, or a ``subtree`` relative to the caller.

    ``subtree``: ``""`` or ``"."`` is the caller's own namespace, ``"a/b"`` a descendant,
    ``"/acme/eng"`` an absolute namespace (which must still be inside the caller's).
    """

    ids: tuple[UUID, ...] | None = None
    subject: str | None = None
    subtree: str | None = None
    reason: str


class Derived(msgspec.Struct, frozen=True, kw_only=True):
    """A consolidation proposal, the memories whose text it may hold (``sources``: every
    source once a reviewer edited it, else the one its extractive draft chose), and the L3
    document its approval published, if any. Erasing one of those memories erases what was
    drafted from it: the proposal's edit (sealed with the proposal's key, destroyed) and
    the document."""

    proposal_id: UUID
    sources: frozenset[UUID]
    document: KnowledgeState | None = None


class ForgetState(msgspec.Struct, frozen=True, kw_only=True):
    """``targets``: the ids asked for (``ids``) or found by the lookup (subject, subtree);
    ``memories``: the authoritative state of every target and every version its history
    lists (``chain_of``: supersedence, and rejections in review, both ways); ``documents``: the authoritative state of the knowledge documents
    among the ids asked for (``ids``) or found in the subtree by the lookup (``subtree``)."""

    targets: tuple[UUID, ...]
    memories: Mapping[UUID, MemoryState]
    documents: Mapping[UUID, KnowledgeState] = msgspec.field(default_factory=dict)
    derived: tuple[Derived, ...] = ()
    """The consolidation proposals drafted from any of ``memories``."""


class Head(msgspec.Struct, frozen=True):
    position: int
    hash: str


class ForgetDecision(msgspec.Struct, frozen=True, kw_only=True):
    erased: tuple[MemoryState, ...]
    events: tuple[MemoryErased, ...]
    certificate: DeletionCertificate
    erased_documents: tuple[KnowledgeState, ...] = ()
    document_events: tuple[KnowledgeErased, ...] = ()
    shredded_proposals: tuple[UUID, ...] = ()
    """Proposals drafted from an erased memory: their data keys (their edits) are destroyed."""


def target_kind(command: Forget) -> TargetKind:
    check_storable(command)
    given = [k for k in ("ids", "subject", "subtree") if getattr(command, k) is not None]
    if len(given) != 1:
        raise InvalidRequest("give exactly one of ids, subject or subtree")
    if not command.reason.strip() or len(command.reason) > MAX_REASON_LENGTH:
        raise InvalidRequest(f"reason must be 1-{MAX_REASON_LENGTH} characters")
    if command.ids is not None and not 0 < len(command.ids) <= MAX_FORGET_IDS:
        raise InvalidRequest(f"ids must name 1-{MAX_FORGET_IDS} memories")
    if command.subject is not None and not 0 < len(command.subject.strip()) <= MAX_SUBJECT_LENGTH:
        raise InvalidRequest(f"subject must be 1-{MAX_SUBJECT_LENGTH} characters")
    kind: TargetKind = given[0]  # type: ignore[assignment]
    return kind


def own_writes_only(caller: Identity, members_forget_own: bool) -> bool:
    """Admins and owners erase anything in their subtree; a member only its own writes,
    and only where the namespace policy allows it. Everyone else is refused."""
    if caller.role in REVIEWER_ROLES:
        return False
    if caller.role == "member" and members_forget_own:
        return True
    raise Forbidden(f"role {caller.role!r} may not erase memories here")


def resolve_subtree(caller: Identity, subtree: str) -> str:
    """The namespace a ``subtree`` target names; never above or beside the caller."""
    if subtree.startswith("/"):
        target = subtree[1:]
    else:
        segments = caller.namespace.split("/")
        for part in subtree.split("/"):
            if part in {"", "."}:
                continue
            if part == "..":
                if not segments:
                    raise OutsideSubtree(f"{subtree!r} leaves {caller.namespace!r}")
                segments.pop()
            else:
                segments.append(part)
        target = "/".join(segments)
    if not target:
        raise OutsideSubtree(f"{subtree!r} leaves {caller.namespace!r}")
    validate_namespace(target)
    if not is_within(target, caller.namespace):
        raise OutsideSubtree(f"{target!r} is outside {caller.namespace!r}")
    return target


def subject_keys(subject: str) -> frozenset[str]:
    """The normalized forms a data subject goes by: ``dana`` and ``stakeholder:dana``
    both name ``dana``."""
    key = normalize_key(subject)
    keys = {key}
    if ":" in key:
        keys.add(key.split(":", 1)[1].strip())
    return frozenset(k for k in keys if k)


def names_subject(memory: MemoryState, keys: frozenset[str]) -> bool:
    """Whether the memory's subject, tags or selectors name the data subject."""
    return handles_name_subject(memory.subject, (*memory.tags, *memory.selectors), keys)


def handles_name_subject(subject: str | None, handles: Iterable[str], keys: frozenset[str]) -> bool:
    if subject is not None and subject_keys(subject) & keys:
        return True
    for handle in handles:
        normalized = normalize_key(handle)
        if normalized in keys:
            return True
        if ":" in normalized and normalized.split(":", 1)[1].strip() in keys:
            return True
    return False


def erasure_keys(subject: str | None, handles: Iterable[str]) -> frozenset[str]:
    """Every name a memory goes by: it names a data subject exactly when this set meets
    ``subject_keys(data subject)`` (the same rule as ``handles_name_subject``)."""
    keys: set[str] = set()
    for name in (subject, *handles):
        if name is not None:
            keys |= subject_keys(name)
    return frozenset(keys)


def chain_of(start: Iterable[UUID], memories: Mapping[UUID, MemoryState]) -> tuple[set[UUID], set[UUID]]:
    """Every version a history through ``start`` lists: the supersedence links both ways,
    and a review's rejection both ways (a rejected memory's ``kept``, and the memories
    among ``memories`` rejected in favour of a version). Returns (found, still to load)."""
    rejected = rejected_in_favour_of(memories)
    found: set[UUID] = set()
    missing: set[UUID] = set()
    pending = list(start)
    while pending:
        memory_id = pending.pop()
        if memory_id in found or memory_id in missing:
            continue
        memory = memories.get(memory_id)
        if memory is None:
            missing.add(memory_id)
            continue
        found.add(memory_id)
        pending.extend(memory.supersedes)
        pending.extend(memory.superseded_by)
        pending.extend(rejected.get(memory_id, ()))
        if memory.kept is not None:
            pending.append(memory.kept)
    return found, missing


def rejected_in_favour_of(memories: Mapping[UUID, MemoryState]) -> dict[UUID, list[UUID]]:
    """The ``kept`` links read backwards: kept memory -> the memories a review rejected for it.
    The kept memory's own stream does not name them, so they are found only among ``memories``."""
    rejected: dict[UUID, list[UUID]] = {}
    for memory in memories.values():
        if memory.kept is not None:
            rejected.setdefault(memory.kept, []).append(memory.id)
    return rejected


def _check_visible_target(caller: Identity, memory_id: UUID, memory: MemoryState | None) -> MemoryState:
    """An id outside the subtree: refused if the caller can see it (an ancestor's),
    otherwise indistinguishable from a missing memory."""
    if memory is None:
        raise NotFound(f"no such memory {memory_id}")
    if not is_within(memory.namespace, caller.namespace):
        if memory.namespace in ancestors(caller.namespace) and not memory.hidden:
            raise OutsideSubtree(
                f"memory {memory_id} is above {caller.namespace!r}; erasure works downward only"
            )
        raise NotFound(f"no such memory {memory_id}")
    return memory


def _chosen(
    command: Forget, kind: TargetKind, caller: Identity, state: ForgetState, own_only: bool
) -> tuple[list[MemoryState], str, str | None]:
    """The targeted memories, the namespace the erasure is confined to, and the target."""
    if kind == "ids":
        chosen = []
        for memory_id in dict.fromkeys(command.ids or ()):
            if memory_id in state.documents:
                continue  # a knowledge document: _chosen_documents
            memory = _check_visible_target(caller, memory_id, state.memories.get(memory_id))
            if own_only and memory.actor != caller.actor:
                raise Forbidden(f"memory {memory_id} was written by another actor")
            chosen.append(memory)
        return chosen, caller.namespace, None
    if kind == "subtree":
        root = resolve_subtree(caller, command.subtree or "")
        target = root
        keys: frozenset[str] = frozenset()
    else:
        root = caller.namespace
        keys = subject_keys(command.subject or "")
        target = subject_digest(command.subject or "")
    found = (state.memories.get(i) for i in dict.fromkeys(state.targets))
    chosen = [
        m
        for m in found
        # only the authoritative state counts (the lookup may be stale)
        if m is not None
        and is_within(m.namespace, root)
        and (kind != "subject" or names_subject(m, keys))
        and (not own_only or m.actor == caller.actor)
    ]
    return chosen, root, target


def _check_visible_document(caller: Identity, document: KnowledgeState) -> KnowledgeState:
    """The same rule as for memories: above the caller refused, beside it missing."""
    if not is_within(document.namespace, caller.namespace):
        if document.namespace in ancestors(caller.namespace):
            raise OutsideSubtree(
                f"knowledge document {document.document_id} is above {caller.namespace!r};"
                " erasure works downward only"
            )
        raise NotFound(f"no such memory {document.document_id}")
    return document


def _chosen_documents(
    command: Forget, kind: TargetKind, caller: Identity, state: ForgetState, own_only: bool, root: str
) -> list[KnowledgeState]:
    """The knowledge documents erased with the memories (not yet erased ones, by id)."""
    if kind == "ids":
        chosen = []
        for document_id in dict.fromkeys(command.ids or ()):
            document = state.documents.get(document_id)
            if document is None:
                continue
            _check_visible_document(caller, document)
            if own_only:
                raise Forbidden(
                    f"knowledge document {document_id} is erased only by an admin or owner, not a member"
                )
            chosen.append(document)
    elif kind == "subtree" and not own_only:
        # only the authoritative state counts (the lookup may be stale)
        chosen = [d for d in state.documents.values() if is_within(d.namespace, root)]
    else:
        return []
    return sorted((d for d in chosen if not d.erased), key=lambda d: str(d.document_id))


def _whole_chains(
    chosen: list[MemoryState], kind: TargetKind, caller: Identity, state: ForgetState, own_only: bool
) -> list[MemoryState]:
    """Every version each chosen fact's history lists, so no older, newer or rejected
    version survives it."""
    chain, missing = chain_of((m.id for m in chosen), state.memories)
    if missing:
        raise InvalidState("the supersedence chain could not be loaded whole; retry")
    members = [state.memories[i] for i in sorted(chain, key=str)]
    if any(not is_within(m.namespace, caller.namespace) for m in members):
        raise OutsideSubtree(f"a version of this fact lives outside {caller.namespace!r}")
    if own_only:
        foreign_ids = [m.id for m in members if m.actor != caller.actor]
        if foreign_ids and kind == "ids":
            raise Forbidden("another version of this fact was written by another actor")
        # a chain that is not wholly the member's own is left alone, whole
        foreign, _ = chain_of(foreign_ids, state.memories)
        members = [m for m in members if m.id not in foreign]
    return [m for m in members if m.status != "erased"]


def decide_forget(
    command: Forget,
    caller: Identity,
    state: ForgetState,
    members_forget_own: bool,
    now: datetime,
    certificate_id: UUID,
    head: Head,
    key_id: str,
) -> ForgetDecision:
    kind = target_kind(command)
    own_only = own_writes_only(caller, members_forget_own)
    chosen, root, target = _chosen(command, kind, caller, state, own_only)
    documents = _chosen_documents(command, kind, caller, state, own_only, root)
    erased = _whole_chains(chosen, kind, caller, state, own_only)
    documents, shredded = _with_derived(state.derived, {m.id for m in erased}, documents)
    events = tuple(
        MemoryErased(
            memory_id=m.id, namespace=m.namespace, certificate_id=certificate_id, by=caller.actor, at=now
        )
        for m in erased
    )
    document_events = tuple(
        KnowledgeErased(
            document_id=d.document_id,
            namespace=d.namespace,
            certificate_id=certificate_id,
            by=caller.actor,
            at=now,
        )
        for d in documents
    )
    ids = tuple(sorted((m.id for m in erased), key=str))
    document_ids = tuple(d.document_id for d in documents)
    certificate = DeletionCertificate(
        id=certificate_id,
        erased_ids=ids,
        erased_documents=document_ids,
        count=len(ids) + len(document_ids),
        scope=root,
        target_kind=kind,
        target=target,
        ledger_position=head.position,
        ledger_hash=head.hash,
        time=now,
        requester=caller.actor,
        requester_namespace=caller.namespace,
        requester_role=caller.role,
        reason=command.reason,
        key_id=key_id,
    )
    return ForgetDecision(
        erased=tuple(erased),
        events=events,
        certificate=certificate,
        erased_documents=tuple(documents),
        document_events=document_events,
        shredded_proposals=shredded,
    )


def _with_derived(
    derived: Sequence[Derived], erased: set[UUID], documents: list[KnowledgeState]
) -> tuple[list[KnowledgeState], tuple[UUID, ...]]:
    """The documents to erase, with those published from a proposal drafted from an erased
    memory; and those proposals."""
    hit = [d for d in derived if d.sources & erased]
    chosen = {d.document_id: d for d in documents}
    for d in hit:
        if d.document is not None and not d.document.erased:
            chosen.setdefault(d.document.document_id, d.document)
    shredded = tuple(sorted({d.proposal_id for d in hit}, key=str))
    return sorted(chosen.values(), key=lambda d: str(d.document_id)), shredded
