"""The writes (``write``, ``write_batch``, a queued write), each run by the command runner:
split the content into facts (with an extractor), judge them against their neighbours (the
synchronous band), decide every fact in order, append them all with one audit record, and
decide again on fresh state after a stream conflict (docs/architecture.md §4)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from uuid import UUID

import msgspec

from memwarden.domain.extraction import ExtractionFailed, Extractor
from memwarden.domain.ledger.app import NewMemoryKey
from memwarden.domain.model.commands import ProvenanceClaim, WriteMemory, WritePolicy, validated
from memwarden.domain.model.errors import DomainError, InvalidRequest
from memwarden.domain.model.events import ClaimKind
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.write import MAX_BATCH_ITEMS, MAX_TAGS, Rejection, check_write_allowed
from memwarden.domain.services.band import Banded, SynchronousBand, banded
from memwarden.domain.services.commands import Decided, Note, Retry
from memwarden.domain.services.memory_context import MemoryContext
from memwarden.domain.services.streams import versions_of
from memwarden.domain.services.vectors import embed
from memwarden.domain.services.write_parts import (
    Absent,
    Bands,
    Item,
    Write,
    band_key,
    band_vectors,
    batch_note,
    decide_in_order,
    write_note,
    writes_memory,
)
from memwarden.domain.services.write_results import (
    EXTRACTED_TAG,
    FACTS_REJECTED,
    NO_EXTRACTOR,
    QUEUED_OP,
    STRUCTURED,
    TAGS_FULL,
    VERBATIM_REQUESTED,
    BatchItem,
    BatchResult,
    Split,
    WriteResult,
)

log = logging.getLogger(__name__)


class WriteService:
    def __init__(
        self,
        shared: MemoryContext,
        extractor: Extractor | None,
        band: Callable[[], SynchronousBand | None],
    ) -> None:
        """``band``: the synchronous band, asked at each write (None: no band)."""
        self.shared = shared
        self.extractor = extractor
        self.band = band

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
        return self.shared.runner.audited(
            identity, "write", lambda: self._write(identity, "write", validated(command), now, verbatim)
        )

    def _write(
        self, identity: Identity, op: str, command: WriteMemory, at: datetime | None, verbatim: bool
    ) -> WriteResult:
        check_write_allowed(identity, command.provenance.source)  # before any extractor call
        split = self._split(command, verbatim)
        write = self._prepared(identity.namespace, command, split, self._bands(identity.namespace, [split]))
        position = self._commit(identity, op, [write], at, write_note, strict=True)
        return write.result(position)

    def queue_write(self, identity: Identity, item: BatchItem, enqueue: Callable[[BatchItem], UUID]) -> UUID:
        """Accept a write to run later (``async``): its command checked, handed to
        ``enqueue`` (a durable queue; it names the ticket) and audited now, as the ``write``
        it was asked as. The write itself runs later (``run_queued``), audited then."""

        def queued() -> UUID:
            ticket = enqueue(BatchItem(command=validated(item.command), verbatim=item.verbatim))
            self.shared.runner.record(identity, "write", "ok", f"queued as ticket {ticket}")
            return ticket

        return self.shared.runner.audited(identity, "write", queued)

    def run_queued(self, identity: Identity, item: BatchItem) -> WriteResult:
        """Run a queued write: as ``write``, audited as ``QUEUED_OP`` (the syscall, ``write``,
        was audited when it was queued). ``item`` was checked when it was queued and read
        back by a typed decode (the ticket store's), so it is not converted again."""
        return self.shared.runner.audited(
            identity,
            QUEUED_OP,
            lambda: self._write(identity, QUEUED_OP, item.command, None, item.verbatim),
        )

    def write_batch(
        self, identity: Identity, entries: Sequence[BatchItem | Rejection], now: datetime | None = None
    ) -> BatchResult:
        """Decide up to ``MAX_BATCH_ITEMS`` writes in order, as if each were written after the
        one before it (a later item dedupes against, supersedes or disputes an earlier one),
        and append them all at once with one audit record naming every memory. An item that
        a rule refuses (or a ``Rejection`` the caller found while reading it) is rejected on
        its own; the rest go in. Their new memories are embedded in one call."""
        return self.shared.runner.audited(
            identity, "write_batch", lambda: self._write_batch(identity, entries, now)
        )

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
            else Write.refused(split)
            for command, split in splits
        ]
        position = self._commit(identity, "write_batch", writes, at, batch_note, strict=False)
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

    def _prepared(self, namespace: str, command: WriteMemory | None, split: Split, bands: Bands) -> Write:
        return Write(command, split, self._items(namespace, split, bands))

    def _bands(self, namespace: str, splits: Sequence[Split]) -> Bands:
        """The synchronous band of every fact of ``splits`` it judges: their vectors embedded
        in one call (the embedder sorts them by length into batches), their neighbours looked
        up in one, so a batch of writes costs one model call and one lookup, not one a fact.
        Empty without a band or an embedder."""
        band, embedder = self.band(), self.shared.embedding.embedder
        if band is None or embedder is None:
            return {}
        facts = list({band_key(f): f for s in splits for f in s.commands if banded(f)}.values())
        if not facts:
            return {}
        vectors = embed(embedder, list(dict.fromkeys(f.content for f in facts)))
        found = band.contradicted(namespace, [(f, vectors[f.content]) for f in facts], vectors.model)
        return {band_key(f): band for f, band in zip(facts, found, strict=True)}

    def _commit(
        self,
        identity: Identity,
        op: str,
        writes: Sequence[Write],
        now: datetime | None,
        note_of: Callable[[Sequence[Write], bool], Note],
        *,
        strict: bool,
    ) -> int:
        """Decide every write in order and append all of them in one transaction (on a
        stream conflict, on fresh state). ``strict``: a rule that refuses a fact raises (a
        single write's 400) instead of rejecting that fact."""
        policy = self.shared.policy_for(identity.namespace)
        absent = Absent(frozenset(item.text_claim_id for w in writes for item in w.items))
        new_keys: dict[UUID, NewMemoryKey] = {}
        vectors = band_vectors(writes)  # embedded once, whatever the retries

        def decide(at: datetime) -> Decided[int]:
            versions = self._decide_writes(identity, writes, policy, at, absent, strict=strict)
            decisions = [d for w in writes for d in w.decisions]
            writers = [d.memory_id for d in decisions if d.memory_id is not None and writes_memory(d)]
            for memory_id in writers:
                if memory_id not in new_keys:
                    new_keys[memory_id] = self.shared.ledger.new_data_key(memory_id)
            return Decided(
                result=int,
                events=self.shared.embedding.embedded([e for d in decisions for e in d.events], vectors),
                versions=versions,
                note=note_of(writes, None in vectors.values()),
                new_keys=[new_keys[memory_id] for memory_id in writers],
            )

        retry = Retry("the memory's claims kept changing; retry the write", on_conflict=absent.clear)
        return self.shared.runner.run(identity, op, decide, retry, now)

    def _decide_writes(
        self,
        identity: Identity,
        writes: Sequence[Write],
        policy: WritePolicy,
        now: datetime,
        absent: Absent,
        *,
        strict: bool,
    ) -> dict[UUID, int]:
        """Decide the writes in order on the claims and holders as they are; the versions
        read. A write none of whose facts is worth keeping is judged whole instead (once),
        so its content is never lost."""
        while True:
            items = [item for w in writes for item in w.items]
            claims = self.shared.streams.claims([x for item in items for x in item.wanted], absent.ids)
            holders = self.shared.streams.memories(h for c in claims.values() for h in c.holders)
            versions = versions_of(claims.values(), holders.values())
            decide_in_order(identity, writes, claims, holders, policy, now, strict=strict)
            rejudged = [w for w in writes if w.command is not None and w.split.extracted and w.all_rejected]
            if not rejudged:
                return versions
            for w in rejudged:
                assert w.command is not None
                w.split = Split(commands=(w.command,), verbatim_reason=FACTS_REJECTED)
                w.items = self._items(identity.namespace, w.split, self._bands(identity.namespace, [w.split]))
                absent.ids |= {item.text_claim_id for item in w.items}

    def _items(self, namespace: str, split: Split, bands: Bands) -> list[Item]:
        return [self._item(namespace, fact, split, bands) for fact in split.commands]

    def _item(self, namespace: str, fact: WriteMemory, split: Split, bands: Bands) -> Item:
        """One fact and its claims; with the synchronous band (``bands``), also the text
        claims of the neighbours it contradicts, so each decision sees them as they are."""
        wanted = self._write_claims(namespace, fact, split)
        found = bands.get(band_key(fact), Banded())
        for pair in found.contradicted:
            assert pair.neighbour.content is not None
            wanted.append((self.shared.claim_ids.text(namespace, pair.neighbour.content), "text", namespace))
        return Item(fact, self.shared.new_id(), self.shared.new_id(), wanted, found, self.shared.new_id)

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
            (self.shared.claim_ids.text(namespace, command.content), "text", namespace)
        ]
        if command.subject is not None and command.attribute is not None:
            wanted.append(
                (self.shared.claim_ids.slot(namespace, command.subject, command.attribute), "slot", namespace)
            )
        if command.provenance.ref is not None and not split.extracted:
            ref_id = self.shared.claim_ids.source_ref(
                namespace, command.provenance.source, command.provenance.ref
            )
            wanted.append((ref_id, "source_ref", namespace))
        return wanted
