"""Publish L3 knowledge documents through the write path's governance.

One published document is one command (the command runner's): its ``KnowledgePublished``
event (the next version of its stream, optimistic concurrency on that version), its audit
record and, with
its first sealed version, the document's data key (every version is sealed with it).
An unchanged document appends its audit record alone; a refused one is audited as denied.
Loading a directory publishes file by file: one bad file never stops the others, and no
document is ever half written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal
from uuid import UUID

import msgspec

from memwarden.domain.embedding import Embedder, EmbedderUnavailable, uncached, vector_to_bytes
from memwarden.domain.ledger.app import Ledger, NewMemoryKey
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import DomainError, InvalidRequest, InvalidState
from memwarden.domain.model.events import KnowledgeErased, KnowledgePublished
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.knowledge import (
    KnowledgeDraft,
    KnowledgeState,
    check_publisher,
    chunk_markdown,
    current_state,
    decide_publish,
    embedding_input,
    fold_knowledge,
    knowledge_stream,
    next_version,
    parse_document,
    resolve_namespace,
)
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.text import quote_text
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry, utcnow

OP = "knowledge_publish"
MAX_ATTEMPTS = 8
EMBEDDING_UNAVAILABLE = "embedding unavailable"
LoadOutcome = Literal["published", "unchanged", "rejected"]


class KnowledgeLoadResult(msgspec.Struct, frozen=True, kw_only=True):
    """What became of one document. ``position`` is the ledger position of the append that
    recorded it (the publication with its audit record, or the audit record alone)."""

    path: str
    outcome: LoadOutcome
    slug: str | None = None
    namespace: str | None = None
    version: int | None = None
    document_id: UUID | None = None
    position: int | None = None
    chunks: int = 0
    embedded: bool = False
    detail: str = ""
    code: str | None = None


class _Known:
    """What is known of a document so far, so that a refusal can still name it."""

    __slots__ = ("document_id", "namespace", "slug")

    def __init__(self) -> None:
        self.slug: str | None = None
        self.namespace: str | None = None
        self.document_id: UUID | None = None

    def learn(self, draft: KnowledgeDraft, target: str) -> None:
        self.slug, self.namespace = draft.slug, target
        self.document_id = knowledge_stream(target, draft.slug)


class _File:
    """One file of a directory load, read and parsed (or refused) before any publishing."""

    __slots__ = ("draft", "error", "known", "path", "target")

    def __init__(
        self,
        path: str,
        known: _Known,
        *,
        draft: KnowledgeDraft | None = None,
        target: str = "",
        error: DomainError | None = None,
    ) -> None:
        self.path = path
        self.known = known
        self.draft = draft
        self.target = target
        self.error = error


class _Embedded(msgspec.Struct, frozen=True):
    vectors: tuple[bytes | None, ...]
    model: str | None
    note: str | None  # why there are no vectors, when there are none


class KnowledgeService:
    def __init__(
        self,
        ledger: Ledger,
        embedder: Embedder | None,
        policy_for: Callable[[str], WritePolicy],
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
    ) -> None:
        self.ledger = ledger
        self.embedder = embedder
        self.policy_for = policy_for
        self.clock = clock
        self.new_id = new_id
        # late-bound: a caller may swap the clock or id source after construction
        self.runner = CommandRunner(ledger, None, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108

    # -- syscalls ----------------------------------------------------------------------------

    def load_directory(
        self, identity: Identity, directory: Path, namespace: str | None = None
    ) -> list[KnowledgeLoadResult]:
        """Publish every ``*.md`` file below ``directory`` (recursive, sorted by path; files
        in hidden directories such as ``.git`` are skipped), one result per file.

        ``namespace`` (default: the caller's) is where documents land unless their front
        matter names a namespace below it. Every file is read and parsed before anything is
        published, so two files that claim the same document are both refused (neither
        silently wins). A refused file is audited and reported, and the others still load.
        Raises only when the directory or the namespace itself is bad.
        """
        base = namespace or identity.namespace
        self.runner.audited(identity, OP, lambda: self._check_load(identity, directory, base))
        limit = self.policy_for(base).max_content_bytes
        files = [self._read_file(path, directory, base, limit) for path in markdown_files(directory)]
        claims: dict[tuple[str, str], list[str]] = {}
        for file in files:
            if file.draft is not None:
                claims.setdefault((file.target, file.draft.slug), []).append(file.path)
        return [self._load_file(identity, file, claims) for file in files]

    def publish(
        self, identity: Identity, text: str, filename: str, namespace: str | None = None
    ) -> KnowledgeLoadResult:
        """Publish one document's text: ``published``, ``unchanged`` or ``rejected`` (a
        refusal is audited as denied and reported in the result, never raised)."""
        known = _Known()
        return self._refusals_reported(
            identity, filename, known, lambda: self._publish_text(identity, text, filename, namespace, known)
        )

    def current(self, document_id: UUID) -> KnowledgeState | None:
        """The document's current version, from the latest event of its ledger stream (an
        erased document's from its whole stream: the erasure ends it, content-free)."""
        head = self.ledger.stream_heads([document_id]).get(document_id)
        if head is not None and isinstance(head.event, KnowledgeErased):
            stream = self.ledger.streams([document_id]).get(document_id, [])
            return fold_knowledge(r.event for r in stream)
        if head is None or not isinstance(head.event, KnowledgePublished):
            return None
        return current_state(head.event)

    def versions(self, document_id: UUID) -> list[KnowledgePublished]:
        """Every published version of the document, oldest first."""
        stream = self.ledger.streams([document_id]).get(document_id, [])
        return [r.event for r in stream if isinstance(r.event, KnowledgePublished)]

    # -- one file ------------------------------------------------------------------------------

    def _check_load(self, identity: Identity, directory: Path, base: str) -> None:
        validate_namespace(base)
        check_publisher(identity, base)
        if not directory.is_dir():
            raise InvalidRequest(f"{directory} is not a directory")

    def _read_file(self, path: Path, directory: Path, base: str, limit: int) -> _File:
        """Read and parse one file; a problem is kept, to be audited and reported in order."""
        relative = path.relative_to(directory).as_posix()
        known = _Known()
        try:
            draft, target = self._prepare(read_text(path, relative, limit), relative, base, known)
        except DomainError as error:
            return _File(relative, known, error=error)
        return _File(relative, known, draft=draft, target=target)

    def _load_file(
        self, identity: Identity, file: _File, claims: dict[tuple[str, str], list[str]]
    ) -> KnowledgeLoadResult:
        def run() -> KnowledgeLoadResult:
            if file.draft is None:
                raise file.error or InvalidState(f"{file.path}: not read")
            others = [p for p in claims[file.target, file.draft.slug] if p != file.path]
            if others:
                raise InvalidRequest(
                    f"{file.path}: {file.target}/{file.draft.slug} is also claimed by {', '.join(others)}"
                )
            return self._publish_draft(identity, file.draft, file.target)

        return self._refusals_reported(identity, file.path, file.known, run)

    def _publish_text(
        self, identity: Identity, text: str, filename: str, namespace: str | None, known: _Known
    ) -> KnowledgeLoadResult:
        base = validate_namespace(namespace or identity.namespace)
        check_storable(text, f"{quote_text(filename)}:")  # before encoding: it may not encode
        size = len(text.encode("utf-8"))
        limit = self.policy_for(base).max_content_bytes
        if size > limit:
            raise InvalidRequest(f"{filename}: {size} bytes; the limit is {limit}")
        draft, target = self._prepare(text, filename, base, known)
        return self._publish_draft(identity, draft, target)

    def _prepare(self, text: str, filename: str, base: str, known: _Known) -> tuple[KnowledgeDraft, str]:
        draft = parse_document(text, filename)
        known.slug = draft.slug
        try:
            target = resolve_namespace(base, draft.namespace)
        except DomainError as error:
            raise type(error)(f"{filename}: {error.detail}") from error
        known.learn(draft, target)
        return draft, target

    def _publish_draft(self, identity: Identity, draft: KnowledgeDraft, target: str) -> KnowledgeLoadResult:
        """Decide against the stream's current version and append (again on a conflict:
        another publisher took the version). Embeddings are made once, and only when there
        is something new to publish; an unchanged document appends its audit record alone."""
        document_id = knowledge_stream(target, draft.slug)
        policy = self.policy_for(target)
        embedded: list[_Embedded] = []

        def decide(now: datetime) -> Decided[KnowledgeLoadResult]:
            current = self.current(document_id)
            if next_version(identity, draft, target, current, policy) is None:
                assert current is not None
                return _unchanged(draft, current)
            if not embedded:
                embedded.append(self._embed(draft))
            event = decide_publish(
                identity, draft, target, current, policy, now, embedded[0].vectors, embedded[0].model
            )
            assert event is not None
            return _published(draft, target, event, embedded[0].note, self._new_data_key(document_id))

        retry = Retry(f"{draft.source}: {target}/{draft.slug} kept changing; load it again", MAX_ATTEMPTS)
        return self.runner.run(identity, OP, decide, retry)

    def _new_data_key(self, document_id: UUID) -> NewMemoryKey | None:
        """A key for the document when it has none yet (its first version, or the first
        since sealing began): stored by the publication's append. Otherwise its key is
        reused. Two publishers racing to make one take the same stream version, so only
        one append (and its key) is stored; the other re-decides and finds that key."""
        if self.ledger.data_keys.get(document_id) is not None:
            return None
        return self.ledger.new_data_key(document_id)

    def _embed(self, draft: KnowledgeDraft) -> _Embedded:
        """One batch for all chunks. No embedder, or one that fails: lexical-only, said so."""
        sections = chunk_markdown(draft.body)
        if self.embedder is None:
            return _Embedded((None,) * len(sections), None, EMBEDDING_UNAVAILABLE + " (no embedder)")
        texts = [embedding_input(draft.title, heading, text) for heading, text in sections]
        try:
            vectors = _vectors(self.embedder, texts)
        except (EmbedderUnavailable, ValueError) as error:
            return _Embedded((None,) * len(sections), None, f"{EMBEDDING_UNAVAILABLE} ({error})"[:120])
        return _Embedded(vectors, self.embedder.model_id, None)

    def _refusals_reported(
        self, identity: Identity, path: str, known: _Known, run: Callable[[], KnowledgeLoadResult]
    ) -> KnowledgeLoadResult:
        """A refusal is audited (denied) on its own and reported as ``rejected``; any other
        failure is audited (error) and raised: it is not the document's fault."""
        try:
            return run()
        except DomainError as error:
            detail = error.detail if error.detail.startswith(path) else f"{path}: {error.detail}"
            position = self.runner.refused(identity, OP, error, detail, known.document_id)
            return KnowledgeLoadResult(
                path=path,
                outcome="rejected",
                slug=known.slug,
                namespace=known.namespace,
                document_id=known.document_id,
                position=position,
                detail=detail,
                code=error.code,
            )
        except Exception as error:
            self.runner.failed(identity, OP, error, f"{path}: {type(error).__name__}", known.document_id)
            raise


def _published(
    draft: KnowledgeDraft,
    target: str,
    event: KnowledgePublished,
    embedding_note: str | None,
    new_key: NewMemoryKey | None,
) -> Decided[KnowledgeLoadResult]:
    document_id = event.document_id
    detail = f"{draft.slug} v{event.version}, {chunk_count(len(event.chunks))}"
    if embedding_note:
        detail += f"; {embedding_note}"
    return Decided(
        result=lambda position: KnowledgeLoadResult(
            path=draft.source,
            outcome="published",
            slug=draft.slug,
            namespace=target,
            version=event.version,
            document_id=document_id,
            position=position,
            chunks=len(event.chunks),
            embedded=event.embedding_model is not None,
            detail=detail,
        ),
        events=[event],
        versions={document_id: event.version - 1},
        note=Note(f"{draft.source}: {detail}", subjects=(document_id,)),
        new_keys=[new_key] if new_key is not None else [],
    )


def _unchanged(draft: KnowledgeDraft, current: KnowledgeState) -> Decided[KnowledgeLoadResult]:
    detail = f"{draft.slug} v{current.version} unchanged"
    return Decided(
        result=lambda position: KnowledgeLoadResult(
            path=draft.source,
            outcome="unchanged",
            slug=draft.slug,
            namespace=current.namespace,
            version=current.version,
            document_id=current.document_id,
            position=position,
            chunks=current.chunks,
            detail=detail,
        ),
        note=Note(f"{draft.source}: {detail}", subjects=(current.document_id,)),
    )


def chunk_count(count: int) -> str:
    return f"{count} chunk" if count == 1 else f"{count} chunks"


def _vectors(embedder: Embedder, texts: Sequence[str]) -> tuple[bytes, ...]:
    """One vector per text, in the ledger's compact form. A reply that is not one row per
    text is the embedder failing (EmbedderUnavailable); a non-finite value is a ValueError."""
    rows = uncached(embedder).embed(texts)
    if rows.ndim != 2 or rows.shape[0] != len(texts):
        raise EmbedderUnavailable(f"{len(texts)} texts, an array of shape {rows.shape}")
    return tuple(vector_to_bytes(row) for row in rows)


def read_text(path: Path, relative: str, limit: int) -> str:
    """The file's text: refused when larger than ``limit`` bytes or not UTF-8."""
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise InvalidRequest(f"{relative}: cannot be read ({error.strerror or error})") from error
    if len(data) > limit:
        raise InvalidRequest(f"{relative}: larger than the limit of {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidRequest(f"{relative}: not UTF-8 text (byte {error.start})") from error


def markdown_files(directory: Path) -> Sequence[Path]:
    """The *.md files under ``directory`` (hidden ones aside), in path order."""
    found = (
        p
        for p in directory.rglob("*.md")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())
