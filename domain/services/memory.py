"""The memory commands (write, write_batch, resolve_dispute, verify), each run by the
command runner: load state, decide, append with the audit record, retry on conflicts.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import TypeVar
from uuid import UUID

import msgspec

from memwarden.domain.embedding import Embedder, EmbedderUnavailable, embed_rows, vector_to_bytes
from memwarden.domain.extraction import ExtractionFailed, Extractor
from memwarden.domain.ledger.app import Ledger, NewMemoryKey
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.classification import Classification
from memwarden.domain.model.commands import (
    ProvenanceClaim,
    ResolveDispute,
    VerifyMemory,
    WriteMemory,
    WritePolicy,
)
from memwarden.domain.model.disputes import ResolveState, check_reviewer, decide_resolve
from memwarden.domain.model.errors import DomainError, InvalidRequest
from memwarden.domain.model.events import (
    ClaimKind,
    ClaimSet,
    Event,
    MemoryReaffirmed,
    MemorySuperseded,
    MemoryWritten,
    TrustTier,
)
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.memory import (
    Claim,
    DisputeState,
    MemoryState,
    evolve_claim,
    evolve_memory,
)
from memwarden.domain.model.text import normalize, normalize_key
from memwarden.domain.model.verification import decide_verify
from memwarden.domain.model.write import (
    MAX_BATCH_ITEMS,
    MAX_TAGS,
    Outcome,
    Rejection,
    WriteDecision,
    WriteState,
    check_write_allowed,
    decide_write,
)
from memwarden.domain.services.band import Banded, SynchronousBand, banded
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry
from memwarden.domain.services.streams import Streams

log = logging.getLogger(__name__)
EMBEDDING_UNAVAILABLE = "embedding unavailable"
# Why a write's content was stored verbatim (besides an ExtractionFailed's reason):
NO_EXTRACTOR = "no_extractor"
VERBATIM_REQUESTED = "verbatim_requested"
STRUCTURED = "structured"  # a slot's value is one fact already
TAGS_FULL = "tags_full"  # no room for the marker tag
FACTS_REJECTED = "facts_rejected"  # every extracted fact was rejected
QUEUED_OP = "write_ticket"
"""The audit op of a queued (``async``) write when it runs."""
EXTRACTED_TAG = "extracted"
"""The tag every extracted fact carries (its provenance is the write's own)."""


class ProvenanceCapped(msgspec.Struct, frozen=True, kw_only=True):
    """A provenance claim above the key's cap, and the source the memory carries instead."""

    claimed: str
    applied: str


class FactResult(msgspec.Struct, frozen=True, kw_only=True):
    """The decision on one extracted fact (its text is not repeated: read it by ``id``)."""

    outcome: Outcome
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    provenance_capped: ProvenanceCapped | None = None
    findings: tuple[UUID, ...] = ()
    decisions: tuple[UUID, ...] = ()


class WriteResult(msgspec.Struct, frozen=True, kw_only=True):
    """A write's result: when the content was split (``extracted``), ``facts`` holds each
    fact's decision and the top-level fields describe the first; otherwise
    ``verbatim_reason`` says why the content was stored as it came."""

    outcome: Outcome
    id: UUID | None
    supersedes: tuple[UUID, ...] = ()
    dispute_id: UUID | None = None
    position: int
    classification: Classification | None = None
    rejected: tuple[Rejection, ...] = ()
    extracted: bool = False
    verbatim_reason: str | None = None
    facts: tuple[FactResult, ...] = ()
    provenance_capped: ProvenanceCapped | None = None
    findings: tuple[UUID, ...] = ()
    """Findings the synchronous band opened in the write's own append: contradictions the
    namespace's ``conflict_review`` dial leaves to a person (the new memory is stored)."""
    decisions: tuple[UUID, ...] = ()
    """The band's automatic settlements in the same append: each a decision with its rule
    and explanation, which a reviewer may overturn."""


class Split(msgspec.Struct, frozen=True, kw_only=True):
    """What a write decides: the extracted facts, or the command itself and why."""

    commands: tuple[WriteMemory, ...]
    verbatim_reason: str | None

    @property
    def extracted(self) -> bool:
        return self.verbatim_reason is None


class BatchItem(msgspec.Struct, frozen=True, kw_only=True):
    """One write of a batch, as ``write`` takes it."""

    command: WriteMemory
    verbatim: bool = False


class BatchResult(msgspec.Struct, frozen=True, kw_only=True):
    """One result per item, in order; all share the batch's one append (``position``)."""

    results: tuple[WriteResult, ...]
    position: int


class ResolveResult(msgspec.Struct, frozen=True, kw_only=True):
    dispute: DisputeState
    position: int


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    id: UUID
    trust_tier: TrustTier
    position: int


C = TypeVar("C", WriteMemory, ResolveDispute, VerifyMemory)


def validated(command: C) -> C:
    """Check a command's field types: a Struct built in Python is not validated, and a
    wrongly typed value must never reach the ledger (it could not be decoded again)."""
    try:
        return msgspec.convert(msgspec.to_builtins(command), type(command))
    except (msgspec.ValidationError, TypeError) as error:
        raise InvalidRequest(f"invalid {type(command).__name__}: {error}") from error


def utcnow() -> datetime:
    return datetime.now(UTC)


class ClaimIds:
    """Claim stream ids: keyed HMACs, so an id reveals nothing of the text it stands for."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _id(self, *parts: str) -> UUID:
        # surrogatepass: a lone surrogate still gets an id; the decider then rejects the write
        joined = "\x00".join(parts).encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, joined, hashlib.sha256).digest()
        return UUID(bytes=digest[:16], version=4)

    def text(self, namespace: str, content: str) -> UUID:
        return self._id("text", namespace, normalize(content))

    def slot(self, namespace: str, subject: str, attribute: str) -> UUID:
        return self._id("slot", namespace, normalize_key(subject), normalize_key(attribute))

    def source_ref(self, namespace: str, source: str, ref: str) -> UUID:
        return self._id("source_ref", namespace, source, normalize_key(ref))


class MemoryService:
    def __init__(
        self,
        ledger: Ledger,
        claim_ids: ClaimIds,
        policy_for: Callable[[str], WritePolicy] | None = None,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
        embedder: Embedder | None = None,
        extractor: Extractor | None = None,
    ) -> None:
        self.ledger = ledger
        self.configured_embedder = embedder
        self.serving_embedder: Callable[[], Embedder | None] | None = None
        """The embedder of the model the search index serves (set by the composition root,
        which has the read models); without it, the configured one."""
        self.extractor = extractor
        self.streams = Streams(ledger)
        self.claim_ids = claim_ids
        self.policy_for = policy_for or (lambda _namespace: WritePolicy())
        self.clock = clock
        self.new_id = new_id
        self.band: SynchronousBand | None = None
        """The synchronous band (set by the composition root, which has the read models)."""
        # late-bound: a caller may swap the clock or id source after construction
        self.runner = CommandRunner(ledger, self.streams, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108

    @property
    def embedder(self) -> Embedder | None:
        """What new memories are embedded by: the served model's embedder, so the vector
        lane finds them at once (a new configured model waits for the switch)."""
        serving = self.serving_embedder
        return serving() if serving is not None else self.configured_embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self.configured_embedder = embedder
        self.serving_embedder = None

    # -- write ----------------------------------------------------------------------------

    def write(
        self,
        identity: Identity,
        command: WriteMemory,
        now: datetime | None = None,
        *,
        verbatim: bool = False,
    ) -> WriteResult:
        """Decide and append one write. With an extractor configured and ``verbatim``
        false, the content is first split into facts, each decided on its own, all in one
        append; otherwise (or when extraction fails) the content is stored verbatim and the
        result and the audit record say why."""
        return self.runner.audited(
            identity, "write", lambda: self._write(identity, "write", validated(command), now, verbatim)
        )

    def _write(
        self, identity: Identity, op: str, command: WriteMemory, at: datetime | None, verbatim: bool
    ) -> WriteResult:
        check_write_allowed(identity, command.provenance.source)  # before any extractor call
        split = self._split(command, verbatim)
        write = self._prepared(identity.namespace, command, split, self._bands(identity.namespace, [split]))
        position = self._commit(identity, op, [write], at, _write_note, strict=True)
        return write.result(position)

    def queue_write(self, identity: Identity, item: BatchItem, enqueue: Callable[[BatchItem], UUID]) -> UUID:
        """Accept a write to run later (``async``): its command checked, handed to
        ``enqueue`` (a durable queue; it names the ticket) and audited now, as the ``write``
        it was asked as. The write itself runs later (``run_queued``), audited then."""

        def queued() -> UUID:
            ticket = enqueue(BatchItem(command=validated(item.command), verbatim=item.verbatim))
            self.runner.record(identity, "write", "ok", f"queued as ticket {ticket}")
            return ticket

        return self.runner.audited(identity, "write", queued)

    def run_queued(self, identity: Identity, item: BatchItem) -> WriteResult:
        """Run a queued write: as ``write``, audited as ``QUEUED_OP`` (the syscall, ``write``,
        was audited when it was queued)."""
        return self.runner.audited(
            identity,
            QUEUED_OP,
            lambda: self._write(identity, QUEUED_OP, validated(item.command), None, item.verbatim),
        )

    def write_batch(
        self, identity: Identity, entries: Sequence[BatchItem | Rejection], now: datetime | None = None
    ) -> BatchResult:
        """Decide up to ``MAX_BATCH_ITEMS`` writes in order, as if each were written after the
        one before it (a later item dedupes against, supersedes or disputes an earlier one),
        and append them all at once with one audit record naming every memory. An item that
        a rule refuses (or a ``Rejection`` the caller found while reading it) is rejected on
        its own; the rest go in. Their new memories are embedded in one call."""
        return self.runner.audited(identity, "write_batch", lambda: self._write_batch(identity, entries, now))

    def _write_batch(
        self, identity: Identity, entries: Sequence[BatchItem | Rejection], at: datetime | None
    ) -> BatchResult:
        if not 0 < len(entries) <= MAX_BATCH_ITEMS:
            raise InvalidRequest(f"a batch holds 1-{MAX_BATCH_ITEMS} items, not {len(entries)}")
        check_write_allowed(identity, ProvenanceClaim().source)  # the role: the whole batch
        splits = [self._split_entry(identity, entry) for entry in entries]
        bands = self._bands(identity.namespace, [s for _, s in splits if isinstance(s, Split)])
        writes = [
            self._prepared(identity.namespace, command, split, bands)
            if isinstance(split, Split)
            else _Write.refused(split)
            for command, split in splits
        ]
        position = self._commit(identity, "write_batch", writes, at, _batch_note, strict=False)
        return BatchResult(results=tuple(w.result(position) for w in writes), position=position)

    def _split_entry(
        self, identity: Identity, entry: BatchItem | Rejection
    ) -> tuple[WriteMemory | None, Split | Rejection]:
        """An item's command and how it is taken, or why it is refused."""
        if isinstance(entry, Rejection):
            return None, entry
        try:
            command = validated(entry.command)
            check_write_allowed(identity, command.provenance.source)
            return command, self._split(command, entry.verbatim)
        except DomainError as error:
            return None, Rejection(error.code, error.detail)

    def _prepared(self, namespace: str, command: WriteMemory | None, split: Split, bands: _Bands) -> _Write:
        return _Write(command, split, self._items(namespace, split, bands))

    def _bands(self, namespace: str, splits: Sequence[Split]) -> _Bands:
        """The synchronous band of every fact of ``splits`` it judges: their vectors embedded
        in one call (the embedder sorts them by length into batches), their neighbours looked
        up in one, so a batch of writes costs one model call and one lookup, not one a fact.
        Empty without a band or an embedder."""
        embedder = self.embedder
        if self.band is None or embedder is None:
            return {}
        facts = list({_band_key(f): f for s in splits for f in s.commands if banded(f)}.values())
        if not facts:
            return {}
        vectors = self._embed(embedder, list(dict.fromkeys(f.content for f in facts)))
        found = self.band.contradicted(namespace, [(f, vectors[f.content]) for f in facts], vectors.model)
        return {_band_key(f): band for f, band in zip(facts, found, strict=True)}

    def _commit(
        self,
        identity: Identity,
        op: str,
        writes: Sequence[_Write],
        now: datetime | None,
        note_of: Callable[[Sequence[_Write], bool], Note],
        *,
        strict: bool,
    ) -> int:
        """Decide every write in order and append all of them in one transaction (on a
        stream conflict, on fresh state). ``strict``: a rule that refuses a fact raises (a
        single write's 400) instead of rejecting that fact."""
        policy = self.policy_for(identity.namespace)
        absent = _Absent(frozenset(item.text_claim_id for w in writes for item in w.items))
        new_keys: dict[UUID, NewMemoryKey] = {}
        vectors = _band_vectors(writes)  # embedded once, whatever the retries

        def decide(at: datetime) -> Decided[int]:
            versions = self._decide_writes(identity, writes, policy, at, absent, strict=strict)
            decisions = [d for w in writes for d in w.decisions]
            writers = [d.memory_id for d in decisions if d.memory_id is not None and _writes_memory(d)]
            for memory_id in writers:
                if memory_id not in new_keys:
                    new_keys[memory_id] = self.ledger.new_data_key(memory_id)
            return Decided(
                result=int,
                events=self.embedded([e for d in decisions for e in d.events], vectors),
                versions=versions,
                note=note_of(writes, None in vectors.values()),
                new_keys=[new_keys[memory_id] for memory_id in writers],
            )

        retry = Retry("the memory's claims kept changing; retry the write", on_conflict=absent.clear)
        return self.runner.run(identity, op, decide, retry, now)

    def _decide_writes(
        self,
        identity: Identity,
        writes: Sequence[_Write],
        policy: WritePolicy,
        now: datetime,
        absent: _Absent,
        *,
        strict: bool,
    ) -> dict[UUID, int]:
        """Decide the writes in order on the claims and holders as they are; the versions
        read. A write none of whose facts is worth keeping is judged whole instead (once),
        so its content is never lost."""
        while True:
            items = [item for w in writes for item in w.items]
            claims = self.streams.claims([x for item in items for x in item.wanted], absent.ids)
            holders = self.streams.memories(h for c in claims.values() for h in c.holders)
            versions = _versions(claims.values(), holders.values())
            _decide_in_order(identity, writes, claims, holders, policy, now, strict=strict)
            rejudged = [w for w in writes if w.command is not None and w.split.extracted and w.all_rejected]
            if not rejudged:
                return versions
            for w in rejudged:
                assert w.command is not None
                w.split = Split(commands=(w.command,), verbatim_reason=FACTS_REJECTED)
                w.items = self._items(identity.namespace, w.split, self._bands(identity.namespace, [w.split]))
                absent.ids |= {item.text_claim_id for item in w.items}

    def _items(self, namespace: str, split: Split, bands: _Bands) -> list[_Item]:
        return [self._item(namespace, fact, split, bands) for fact in split.commands]

    def _item(self, namespace: str, fact: WriteMemory, split: Split, bands: _Bands) -> _Item:
        """One fact and its claims; with the synchronous band (``bands``), also the text
        claims of the neighbours it contradicts, so each decision sees them as they are."""
        wanted = self._write_claims(namespace, fact, split)
        found = bands.get(_band_key(fact), Banded())
        for pair in found.contradicted:
            assert pair.neighbour.content is not None
            wanted.append((self.claim_ids.text(namespace, pair.neighbour.content), "text", namespace))
        return _Item(fact, self.new_id(), self.new_id(), wanted, found, self.new_id)

    def _split(self, command: WriteMemory, verbatim: bool) -> Split:
        """The write's facts, or the command itself with the reason it stays verbatim."""
        reason = self._verbatim_reason(command, verbatim)
        if reason is None:
            assert self.extractor is not None
            try:
                facts = self.extractor.extract(command.content)
            except ExtractionFailed as error:
                log.warning("extraction failed (%s), content stored verbatim: %s", error.reason, error)
                reason = error.reason
            else:
                tags = command.tags if EXTRACTED_TAG in command.tags else (*command.tags, EXTRACTED_TAG)
                extracted = [msgspec.structs.replace(command, content=f, tags=tags) for f in facts]
                return Split(commands=tuple(extracted), verbatim_reason=None)
        return Split(commands=(command,), verbatim_reason=reason)

    def _verbatim_reason(self, command: WriteMemory, verbatim: bool) -> str | None:
        if self.extractor is None:
            return NO_EXTRACTOR
        if verbatim:
            return VERBATIM_REQUESTED
        if command.subject is not None or command.attribute is not None:
            return STRUCTURED
        if EXTRACTED_TAG not in command.tags and len(command.tags) >= MAX_TAGS:
            return TAGS_FULL
        return None

    def _write_claims(
        self, namespace: str, command: WriteMemory, split: Split
    ) -> list[tuple[UUID, ClaimKind, str]]:
        """The claims the write touches, its text claim first. An extracted fact claims no
        source ref: the ref names the whole content, and one fact must not refresh (retire)
        another fact of the same content."""
        wanted: list[tuple[UUID, ClaimKind, str]] = [
            (self.claim_ids.text(namespace, command.content), "text", namespace)
        ]
        if command.subject is not None and command.attribute is not None:
            wanted.append(
                (self.claim_ids.slot(namespace, command.subject, command.attribute), "slot", namespace)
            )
        if command.provenance.ref is not None and not split.extracted:
            ref_id = self.claim_ids.source_ref(namespace, command.provenance.source, command.provenance.ref)
            wanted.append((ref_id, "source_ref", namespace))
        return wanted

    # -- disputes ---------------------------------------------------------------------------

    def resolve_dispute(
        self, identity: Identity, command: ResolveDispute, now: datetime | None = None
    ) -> ResolveResult:
        return self.runner.audited(
            identity, "resolve_dispute", lambda: self._resolve(identity, validated(command), now)
        )

    def _resolve(self, identity: Identity, command: ResolveDispute, now: datetime | None) -> ResolveResult:
        replacement_id = self.new_id()
        new_keys: dict[UUID, NewMemoryKey] = {}
        vectors = Vectors()

        def decide(at: datetime) -> Decided[ResolveResult]:
            dispute = check_reviewer(
                identity, self.streams.disputes([command.dispute_id]).get(command.dispute_id)
            )
            memories = self.streams.memories([dispute.memory_id, dispute.incumbent_id])
            new = memories.get(dispute.memory_id)
            claims = self._resolve_claims(dispute, new, command)
            holders = self.streams.memories(h for c in claims.values() if c.kind == "slot" for h in c.holders)
            memories = {**holders, **memories}
            state = ResolveState(
                dispute=dispute,
                new=new,
                incumbent=memories.get(dispute.incumbent_id),
                slot_claim=next((c for c in claims.values() if c.kind == "slot"), None),
                text_claim=next((c for c in claims.values() if c.kind == "text"), None),
                holders=holders,
            )
            events = decide_resolve(
                command, identity, state, self.policy_for(dispute.namespace), at, replacement_id
            )
            if command.decision == "edit" and replacement_id not in new_keys:
                new_keys[replacement_id] = self.ledger.new_data_key(replacement_id)
            return Decided(
                result=lambda position: ResolveResult(
                    dispute=self.streams.disputes([dispute.id])[dispute.id], position=position
                ),
                events=self.embedded(events, vectors),
                versions=_versions(claims.values(), memories.values(), [dispute]),
                note=Note(command.decision, subjects=(dispute.id,)),
                new_keys=list(new_keys.values()),
            )

        retry = Retry("the dispute's memories kept changing; retry")
        return self.runner.run(identity, "resolve_dispute", decide, retry, now)

    def _resolve_claims(
        self, dispute: DisputeState, new: MemoryState | None, command: ResolveDispute
    ) -> dict[UUID, Claim]:
        if new is None or command.decision == "keep_old":
            return {}
        content = command.content if command.decision == "edit" else new.content
        wanted: list[tuple[UUID, ClaimKind, str]] = []
        if content is not None:
            wanted.append((self.claim_ids.text(dispute.namespace, content), "text", dispute.namespace))
        if new.subject is not None and new.attribute is not None:
            slot_id = self.claim_ids.slot(dispute.namespace, new.subject, new.attribute)
            wanted.append((slot_id, "slot", dispute.namespace))
        return self.streams.claims(wanted)

    # -- verification -----------------------------------------------------------------------

    def verify(self, identity: Identity, command: VerifyMemory, now: datetime | None = None) -> VerifyResult:
        return self.runner.audited(
            identity, "verify", lambda: self._verify(identity, validated(command), now)
        )

    def _verify(self, identity: Identity, checked: VerifyMemory, now: datetime | None) -> VerifyResult:
        def decide(at: datetime) -> Decided[VerifyResult]:
            memory = self.streams.memories([checked.memory_id]).get(checked.memory_id)
            event = decide_verify(checked, identity, memory, at)
            assert memory is not None
            return Decided(
                result=lambda position: VerifyResult(
                    id=memory.id, trust_tier=event.trust_tier, position=position
                ),
                events=[event],
                versions={memory.id: memory.version},
                note=Note("supports" if checked.supports else "refutes", subjects=(memory.id,)),
            )

        retry = Retry("the memory kept changing; retry the verification")
        return self.runner.run(identity, "verify", decide, retry, now)

    # -- reading authoritative state ---------------------------------------------------------

    def memory(self, memory_id: UUID) -> MemoryState | None:
        return self.streams.memories([memory_id]).get(memory_id)

    def dispute(self, dispute_id: UUID) -> DisputeState | None:
        return self.streams.disputes([dispute_id]).get(dispute_id)

    # -- plumbing -----------------------------------------------------------------------------

    def embedded(self, events: Sequence[Event], vectors: Vectors) -> list[Event]:
        """New memories get their embedding, computed once here and sealed in the event,
        so a replay never re-embeds. An embedder failure stores the memory without one
        (``vectors`` then holds None, and the audit says so): a write is never lost to it.
        Vectors of another model than the embedder's (the served model changed since the
        band's were made) are not used: vectors of two models never mix."""
        embedder = self.embedder
        if embedder is None:
            return list(events)
        if vectors.model not in (None, embedder.model_id):
            vectors.clear()
        vectors.model = embedder.model_id
        texts = [e.content for e in events if isinstance(e, MemoryWritten) and e.content is not None]
        missing = list(dict.fromkeys(t for t in texts if t not in vectors))
        if missing:  # the facts of one write are embedded together
            vectors.update(self._embed(embedder, missing))
        out: list[Event] = []
        for event in events:
            vector = None
            if isinstance(event, MemoryWritten) and event.content is not None:
                vector = vectors[event.content]
            if vector is not None:
                out.append(
                    msgspec.structs.replace(event, embedding=vector, embedding_model=embedder.model_id)
                )
            else:
                out.append(event)
        return out

    @staticmethod
    def _embed(embedder: Embedder, texts: list[str]) -> Vectors:
        vectors = Vectors(model=embedder.model_id)
        try:
            rows = embed_rows(embedder, texts)
            vectors.update((text, vector_to_bytes(row)) for text, row in zip(texts, rows, strict=True))
        except EmbedderUnavailable as error:
            log.warning("embedder unavailable, memory stored without a vector: %s", error)
            vectors.update(dict.fromkeys(texts))
        return vectors


def _write_note(writes: Sequence[_Write], unembedded: bool) -> Note:
    """One record for the whole write: every fact's outcome, how the content was taken
    (extracted, or verbatim and why), and every memory it names."""
    (write,) = writes
    decisions = write.decisions
    outcomes = ", ".join(_outcome_detail(d) for d in decisions)
    if write.split.extracted:
        detail = f"extracted=true, {len(decisions)} facts: {outcomes}"
    else:
        detail = f"extracted=false ({write.split.verbatim_reason}): {outcomes}"
    return _named_note(writes, detail, unembedded)


def _batch_note(writes: Sequence[_Write], unembedded: bool) -> Note:
    """One record for the batch, as for every syscall: the items' outcomes counted, the
    rejected ones by index and first reason, and every memory the batch names."""
    counts = Counter(w.outcome for w in writes)
    detail = f"{len(writes)} items: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
    rejected = [f"#{i} {w.rejections[0].reason}" for i, w in enumerate(writes) if w.outcome == "rejected"]
    if rejected:
        detail += "; rejected " + ", ".join(rejected)
    return _named_note(writes, detail, unembedded)


def _named_note(writes: Sequence[_Write], detail: str, unembedded: bool) -> Note:
    """Denied when nothing was taken; names every memory the writes decided on."""
    if unembedded:
        detail += "; " + EMBEDDING_UNAVAILABLE
    rejected = all(w.all_rejected for w in writes)
    subjects = tuple(
        dict.fromkeys(d.memory_id for w in writes for d in w.decisions if d.memory_id is not None)
    )
    return Note(detail, "denied" if rejected else "ok", subjects)


class _Absent:
    """The claim ids a write guesses are new (not looked up); forgotten after a conflict."""

    def __init__(self, ids: frozenset[UUID]) -> None:
        self.ids = ids

    def clear(self) -> None:
        self.ids = frozenset()


class _Write:
    """One write of a call: its command, how it is taken (``split``), its items and, once
    decided, one decision per item. ``refusal``: refused before any decision."""

    def __init__(self, command: WriteMemory | None, split: Split, items: list[_Item]) -> None:
        self.command = command
        self.split = split
        self.items = items
        self.decisions: list[WriteDecision] = []
        self.refusal: Rejection | None = None

    @classmethod
    def refused(cls, rejection: Rejection) -> _Write:
        write = cls(None, Split(commands=(), verbatim_reason=None), [])
        write.refusal = rejection
        return write

    @property
    def all_rejected(self) -> bool:
        return all(d.outcome == "rejected" for d in self.decisions)

    @property
    def outcome(self) -> Outcome:
        return "rejected" if self.refusal is not None else self.decisions[0].outcome

    @property
    def rejections(self) -> tuple[Rejection, ...]:
        return (self.refusal,) if self.refusal is not None else self.decisions[0].rejected

    def result(self, position: int) -> WriteResult:
        if self.refusal is not None:
            return WriteResult(outcome="rejected", id=None, position=position, rejected=(self.refusal,))
        return _write_result(self.decisions, self.split, position)


def _decide_in_order(
    identity: Identity,
    writes: Sequence[_Write],
    claims: dict[UUID, Claim],
    holders: dict[UUID, MemoryState],
    policy: WritePolicy,
    now: datetime,
    *,
    strict: bool,
) -> None:
    """Decide each item against the state its predecessors leave (folded into ``claims``
    and ``holders``), so two items of one call meet as two writes one after the other."""
    for write in writes:
        write.decisions = []
        for item in write.items:
            try:
                decision = item.decide(identity, claims, holders, policy, now)
            except DomainError as error:
                if strict:
                    raise
                decision = WriteDecision(outcome="rejected", rejected=(Rejection(error.code, error.detail),))
            write.decisions.append(decision)
            _fold(decision.events, claims, holders)


def _fold(events: Iterable[Event], claims: dict[UUID, Claim], holders: dict[UUID, MemoryState]) -> None:
    for event in events:
        if isinstance(event, ClaimSet):
            claims[event.claim_id] = evolve_claim(claims.get(event.claim_id), event)
        elif isinstance(event, MemoryWritten | MemorySuperseded | MemoryReaffirmed):
            holders[event.memory_id] = evolve_memory(holders.get(event.memory_id), event)


class _Item:
    """One command of a write (the content, or one extracted fact) and its claims."""

    def __init__(
        self,
        command: WriteMemory,
        memory_id: UUID,
        dispute_id: UUID,
        wanted: list[tuple[UUID, ClaimKind, str]],
        banded: Banded | None = None,
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.command = command
        self.memory_id = memory_id
        self.dispute_id = dispute_id
        self.wanted = wanted
        self.banded = banded or Banded()
        self.new_id = new_id

    @property
    def text_claim_id(self) -> UUID:
        return self.wanted[0][0]

    def decide(
        self,
        identity: Identity,
        claims: dict[UUID, Claim],
        holders: dict[UUID, MemoryState],
        policy: WritePolicy,
        now: datetime,
    ) -> WriteDecision:
        def claim(kind: ClaimKind) -> Claim | None:
            return next((claims[c] for c, k, _ in self.wanted if k == kind), None)

        state = WriteState(
            text_claim=claims[self.text_claim_id],
            slot_claim=claim("slot"),
            source_ref_claim=claim("source_ref"),
            holders=holders,
            judged=tuple(  # each neighbour as it is now (its text claim was read with the write's)
                msgspec.structs.replace(p, neighbour=holders[p.neighbour.id])
                for p in self.banded.contradicted
                if p.neighbour.id in holders
            ),
            band_judged=self.banded.judged,
            judge=self.banded.judge,
        )
        review_ids = iter([self.new_id() for _ in state.judged])
        return decide_write(
            self.command, identity, state, policy, now, self.memory_id, self.dispute_id, review_ids
        )


def _writes_memory(decision: WriteDecision) -> bool:
    return any(isinstance(e, MemoryWritten) for e in decision.events)


def _outcome_detail(decision: WriteDecision) -> str:
    capped = _capped(decision)
    # sources are names from the trust lattice, never caller text: safe in an audit record
    detail = (
        decision.outcome
        if capped is None
        else f"{decision.outcome} (provenance {capped.claimed} capped to {capped.applied})"
    )
    if decision.findings or decision.decisions:  # the band's, by the namespace's dial
        detail += f" (band: {len(decision.decisions)} settled, {len(decision.findings)} findings)"
    if not decision.rejected:
        return detail
    return detail + ": " + ", ".join(r.reason for r in decision.rejected)


def _capped(decision: WriteDecision) -> ProvenanceCapped | None:
    if decision.provenance_capped is None:
        return None
    claimed, applied = decision.provenance_capped
    return ProvenanceCapped(claimed=claimed, applied=applied)


def _write_result(decisions: Sequence[WriteDecision], split: Split, position: int) -> WriteResult:
    facts = tuple(
        FactResult(
            outcome=d.outcome,
            id=d.memory_id,
            supersedes=d.supersedes,
            dispute_id=d.dispute_id,
            classification=d.classification,
            rejected=d.rejected,
            provenance_capped=_capped(d),
            findings=d.findings,
            decisions=d.decisions,
        )
        for d in decisions
    )
    first = facts[0]
    return WriteResult(
        **msgspec.structs.asdict(first),
        position=position,
        extracted=split.extracted,
        verbatim_reason=split.verbatim_reason,
        facts=facts if split.extracted else (),
    )


_Bands = dict[tuple[str, str | None], Banded]
"""The synchronous band of a write's facts, by what the judge reads of a fact (``_band_key``)."""


def _band_key(fact: WriteMemory) -> tuple[str, str | None]:
    return fact.content, fact.value


class Vectors(dict[str, bytes | None]):
    """Vectors by text, all of one model (``model``; None while there are none)."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.model = model


def _band_vectors(writes: Sequence[_Write]) -> Vectors:
    """The vectors the synchronous band already computed, by text: sealed as they are (those
    of the first one's model: a batch's items may have been embedded apart)."""
    items = [item for w in writes for item in w.items if item.banded.vector is not None]
    vectors = Vectors(model=items[0].banded.model if items else None)
    vectors.update(
        (item.command.content, item.banded.vector) for item in items if item.banded.model == vectors.model
    )
    return vectors


def _versions(*groups: Iterable[Claim | MemoryState | DisputeState]) -> dict[UUID, int]:
    return {state.id: state.version for group in groups for state in group}
