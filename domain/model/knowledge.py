"""L3 knowledge documents (docs/architecture.md section 6): markdown with YAML front matter, published
as immutable, versioned ``KnowledgePublished`` events. Pure: no I/O, no clock.

A document's stream is keyed by (namespace, slug); each version is a whole new event, so a
stream's latest event is its whole state. The write path's governance applies: only admins
and owners publish, only inside their own subtree, and the namespace policy's content checks
(empty, size, secrets) refuse a document with its reasons, never silently.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec
import yaml

from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import Forbidden, InvalidRequest, InvalidState, OutsideSubtree
from memwarden.domain.model.events import Event, KnowledgeChunk, KnowledgeErased, KnowledgePublished
from memwarden.domain.model.identity import REVIEWER_ROLES, Identity
from memwarden.domain.model.namespaces import is_within, tenant_of, validate_namespace
from memwarden.domain.model.storable import unstorable_field
from memwarden.domain.model.text import quote_text
from memwarden.domain.model.write import MAX_TAG_LENGTH, MAX_TAGS, Rejection, verify_content

FRONT_MATTER_KEYS = frozenset({"title", "slug", "namespace", "tags"})
MAX_CHUNK_CHARS = 1_200
MAX_TITLE_LENGTH = 200
MAX_SLUG_LENGTH = 100
HEADING_SEPARATOR = " \u203a "  # a single right-pointing angle quote
PUBLISHER_ROLES = REVIEWER_ROLES

_FENCE_LINE = "---"
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_NOT_SLUG = re.compile(r"[^a-z0-9]+")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_CODE_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


class KnowledgeDraft(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed document, before governance. ``namespace`` is as declared in the front
    matter (relative to the loader's namespace, or absolute inside it); ``None`` = the
    loader's own namespace. ``source`` is the file it came from."""

    title: str
    slug: str
    body: str
    tags: tuple[str, ...] = ()
    namespace: str | None = None
    source: str


class KnowledgeState(msgspec.Struct, frozen=True, kw_only=True):
    """The current version of one document, folded from its stream. ``shredded``: its data
    key was destroyed, so its content (title and hash included) is gone. ``erased``: a
    ``forget`` destroyed it (a KnowledgeErased event ends the stream), so no version follows."""

    document_id: UUID
    namespace: str
    slug: str
    version: int
    title: str
    content_hash: str
    chunks: int
    shredded: bool = False
    erased: bool = False


class KnowledgeRejected(InvalidRequest):
    """The namespace policy refuses the document's content; ``rejections`` says why."""

    def __init__(self, source: str, rejections: Sequence[Rejection]) -> None:
        reasons = "; ".join(f"{r.reason} ({r.detail})" for r in rejections)
        super().__init__(f"{source}: rejected: {reasons}")
        self.rejections = tuple(rejections)


# -- parsing -------------------------------------------------------------------------------


def parse_document(text: str, filename: str) -> KnowledgeDraft:
    """Front matter (optional, between a first line ``---`` and the next ``---`` line),
    then the markdown body. Every problem is an InvalidRequest naming the file."""
    lines = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    meta: dict[str, Any] = {}
    if lines and lines[0].rstrip() == _FENCE_LINE:
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == _FENCE_LINE), None)
        if end is None:
            raise InvalidRequest(f"{filename}: the front matter opened on line 1 is never closed by '---'")
        meta = _front_matter("\n".join(lines[1:end]), filename)
        lines = lines[end + 1 :]
    body = "\n".join(lines).strip()
    if not body:
        raise InvalidRequest(f"{filename}: the document has no body")
    if not chunk_markdown(body):
        raise InvalidRequest(f"{filename}: the document has no text besides its headings")
    return KnowledgeDraft(
        title=_title(meta.get("title"), body, filename),
        slug=_slug(meta.get("slug"), filename),
        body=body,
        tags=_tags(meta.get("tags"), filename),
        namespace=_declared_namespace(meta.get("namespace"), filename),
        source=filename,
    )


def _front_matter(source: str, filename: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(source)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1: 0-based, +1: the '---'
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise InvalidRequest(f"{filename}: invalid YAML front matter{where}: {problem}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InvalidRequest(f"{filename}: the front matter must be a mapping of keys to values")
    unknown = sorted(str(key) for key in loaded if key not in FRONT_MATTER_KEYS)
    if unknown:
        allowed = ", ".join(sorted(FRONT_MATTER_KEYS))
        raise InvalidRequest(f"{filename}: unknown front matter key {unknown[0]!r} (allowed: {allowed})")
    return loaded


def _title(declared: object, body: str, filename: str) -> str:
    if declared is None:
        title = first_heading(body) or _stem(filename)
    elif isinstance(declared, str):
        title = declared
    else:
        raise InvalidRequest(f"{filename}: title must be a string")
    title = " ".join(title.split())
    if not 0 < len(title) <= MAX_TITLE_LENGTH:
        raise InvalidRequest(f"{filename}: title must be 1-{MAX_TITLE_LENGTH} characters")
    return title


def first_heading(body: str) -> str | None:
    """The text of the body's first level-1 heading (outside code blocks), if any."""
    for line, in_code in _lines_with_fences(body):
        match = _HEADING.match(line)
        if not in_code and match and len(match.group(1)) == 1 and match.group(2).strip():
            return match.group(2).strip()
    return None


def _stem(filename: str) -> str:
    return PurePosixPath(filename.replace("\\", "/")).stem


def slug_from_filename(filename: str) -> str:
    """The file stem, accents dropped, lowercased, each run of other characters one ``-``."""
    ascii_stem = unicodedata.normalize("NFKD", _stem(filename)).encode("ascii", "ignore").decode()
    return _NOT_SLUG.sub("-", ascii_stem.lower()).strip("-")[:MAX_SLUG_LENGTH].strip("-")


def _slug(declared: object, filename: str) -> str:
    if declared is None:
        slug = slug_from_filename(filename)
        if not slug:
            raise InvalidRequest(f"{filename}: no slug can be made from the file name; set 'slug'")
        return slug
    if not isinstance(declared, str) or not _SLUG.fullmatch(declared) or len(declared) > MAX_SLUG_LENGTH:
        raise InvalidRequest(
            f"{filename}: slug must be 1-{MAX_SLUG_LENGTH} characters of a-z, 0-9 and single '-'"
        )
    return declared


def _tags(declared: object, filename: str) -> tuple[str, ...]:
    if declared is None:
        return ()
    if not isinstance(declared, list) or not all(isinstance(t, str) for t in declared):
        raise InvalidRequest(f"{filename}: tags must be a list of strings")
    tags = tuple(dict.fromkeys(t.strip() for t in declared))
    if len(tags) > MAX_TAGS:
        raise InvalidRequest(f"{filename}: at most {MAX_TAGS} tags")
    if any(not 0 < len(t) <= MAX_TAG_LENGTH for t in tags):
        raise InvalidRequest(f"{filename}: each tag must be 1-{MAX_TAG_LENGTH} characters")
    return tags


def _declared_namespace(declared: object, filename: str) -> str | None:
    if declared is None:
        return None
    if not isinstance(declared, str) or not declared.strip():
        raise InvalidRequest(f"{filename}: namespace must be a non-empty string")
    return declared.strip()


def resolve_namespace(base: str, declared: str | None) -> str:
    """Where a document published from ``base`` lands.

    ``None`` is ``base`` itself; a value that is ``base`` or below it is taken as it is;
    any other value is relative to ``base`` (``runbooks`` -> ``base/runbooks``). A value
    that names ``base``'s tenant but leaves ``base`` is refused rather than nested, so
    ``acme/sales`` from ``acme/eng`` never silently becomes ``acme/eng/acme/sales``.
    """
    if declared is None:
        return validate_namespace(base)
    if is_within(declared, base):
        return validate_namespace(declared)
    if declared.startswith("/") or ".." in declared.split("/") or "." in declared.split("/"):
        raise InvalidRequest(f"namespace {declared!r} must be a plain path below {base!r}")
    if tenant_of(declared) == tenant_of(base):
        raise OutsideSubtree(f"namespace {declared!r} is outside {base!r}")
    return validate_namespace(f"{base}/{declared}")


# -- chunking ------------------------------------------------------------------------------


def _lines_with_fences(body: str) -> Iterator[tuple[str, bool]]:
    """Each line and whether it belongs to a fenced code block (the fences included)."""
    fence: str | None = None
    for line in body.split("\n"):
        match = _CODE_FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            yield line, True
        elif fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            yield line, True
        else:
            yield line, False


def _sections(body: str) -> list[tuple[str, list[str]]]:
    """(heading path, lines) per heading; the text before the first heading has path ''."""
    stack: list[tuple[int, str]] = []
    sections: list[tuple[str, list[str]]] = [("", [])]
    for line, in_code in _lines_with_fences(body):
        match = None if in_code else _HEADING.match(line)
        if match and match.group(2).strip():
            level = len(match.group(1))
            stack = [(lvl, text) for lvl, text in stack if lvl < level]
            stack.append((level, match.group(2).strip()))
            sections.append((HEADING_SEPARATOR.join(text for _, text in stack), []))
        else:
            sections[-1][1].append(line)
    return sections


def _blocks(lines: list[str]) -> list[str]:
    """Paragraphs (split at blank lines); a fenced code block stays one block."""
    blocks: list[str] = []
    current: list[str] = []
    for line, in_code in _lines_with_fences("\n".join(lines)):
        if not in_code and not line.strip():
            if current:
                blocks.append("\n".join(current).strip("\n"))
            current = []
        else:
            current.append(line.rstrip())
    if current:
        blocks.append("\n".join(current).strip("\n"))
    return [b for b in blocks if b.strip()]


def _split_block(block: str, limit: int) -> list[str]:
    """A block longer than ``limit``: at line ends, then at spaces; a single word longer
    than the limit stays whole (it is never cut)."""
    if len(block) <= limit:
        return [block]
    pieces = _pack(block.split("\n"), "\n", limit)
    out: list[str] = []
    for piece in pieces:
        out.extend([piece] if len(piece) <= limit else _pack(piece.split(), " ", limit))
    return out


def _pack(parts: Sequence[str], joiner: str, limit: int) -> list[str]:
    """Greedily join consecutive parts while the result stays within ``limit``."""
    packed: list[str] = []
    current = ""
    for part in parts:
        candidate = f"{current}{joiner}{part}" if current else part
        if current and len(candidate) > limit:
            packed.append(current)
            current = part
        else:
            current = candidate
    if current:
        packed.append(current)
    return packed


def chunk_markdown(body: str, limit: int = MAX_CHUNK_CHARS) -> list[tuple[str, str]]:
    """(heading path, text) per searchable section, in document order. Deterministic.

    Sections are cut at headings (``#``..``######``, not inside code blocks); a section
    longer than ``limit`` is cut again at paragraph boundaries, never mid-word. The heading
    path (``Deploys``, then ``Rollback``, joined by HEADING_SEPARATOR) gives each chunk its context; sections with no text of
    their own are dropped.
    """
    chunks: list[tuple[str, str]] = []
    for heading, lines in _sections(body):
        blocks = [piece for block in _blocks(lines) for piece in _split_block(block, limit)]
        chunks.extend((heading, text) for text in _pack(blocks, "\n\n", limit))
    return chunks


def embedding_input(title: str, heading: str, text: str) -> str:
    """What is embedded for a chunk: its place in the document (the title, then the heading path), then
    its text. The title is not repeated when the path already starts with it."""
    if heading == title or heading.startswith(title + HEADING_SEPARATOR):
        path = heading
    else:
        path = HEADING_SEPARATOR.join(part for part in (title, heading) if part)
    return f"{path}\n\n{text}"


# -- identity of documents and versions --------------------------------------------------


def knowledge_stream(namespace: str, slug: str) -> UUID:
    """The document's id and stream: stable for (namespace, slug)."""
    return uuid5(NAMESPACE_URL, f"memwarden:knowledge:{namespace}\x00{slug}")


def chunk_id(document_id: UUID, version: int, ordinal: int) -> UUID:
    return uuid5(document_id, f"{version}:{ordinal}")


def content_hash(draft: KnowledgeDraft) -> str:
    """sha256 of the canonical JSON of (title, tags, body): what makes a new version."""
    canonical = json.dumps(
        {"title": draft.title, "tags": list(draft.tags), "body": draft.body},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# -- deciding --------------------------------------------------------------------------------


def check_publisher(identity: Identity, target_namespace: str) -> None:
    """Knowledge is governed: admins and owners publish, only inside their own subtree."""
    if identity.role not in PUBLISHER_ROLES:
        raise Forbidden(f"role {identity.role!r} may not publish knowledge (admins and owners do)")
    validate_namespace(target_namespace)
    if not is_within(target_namespace, identity.namespace):
        raise OutsideSubtree(f"{target_namespace!r} is outside {identity.namespace!r}")


def verify_document(draft: KnowledgeDraft, policy: WritePolicy) -> None:
    """The write path's content checks over everything a document publishes: storable
    text first (a file may hold a NUL, its name undecodable bytes), then the content."""
    unstorable = unstorable_field(draft)
    if unstorable is not None:
        raise InvalidRequest(f"{quote_text(draft.source, 200)}: {unstorable}")
    text = "\n\n".join([draft.title, " ".join(draft.tags), draft.body])
    _classification, rejections = verify_content(text, policy)
    if rejections:
        raise KnowledgeRejected(draft.source, rejections)


def next_version(
    identity: Identity,
    draft: KnowledgeDraft,
    target_namespace: str,
    current: KnowledgeState | None,
    policy: WritePolicy,
) -> int | None:
    """The version a publication would create; ``None`` when the content is unchanged.

    Raises when the caller may not publish there or the policy refuses the content.
    """
    check_publisher(identity, target_namespace)
    verify_document(draft, policy)
    if current is None:
        return 1
    if current.shredded:
        # a new key under the same owner could not open the older versions: never reused
        raise InvalidState(
            f"{draft.source}: {target_namespace}/{draft.slug} was erased (its data key is destroyed);"
            " publish it under another slug"
        )
    if current.content_hash == content_hash(draft):
        return None
    return current.version + 1


def decide_publish(
    identity: Identity,
    draft: KnowledgeDraft,
    target_namespace: str,
    current: KnowledgeState | None,
    policy: WritePolicy,
    now: datetime,
    embeddings: Sequence[bytes | None] = (),
    embedding_model: str | None = None,
) -> KnowledgePublished | None:
    """The next immutable version of the document, or ``None`` when nothing changed.

    ``embeddings`` holds one entry per chunk of ``chunk_markdown(draft.body)`` (``None``:
    that chunk is lexical-only), or nothing at all. The document id and the chunk ids are
    derived here (uuid5), so they can never disagree with the namespace, slug and version.
    """
    version = next_version(identity, draft, target_namespace, current, policy)
    if version is None:
        return None
    sections = chunk_markdown(draft.body)
    vectors = list(embeddings) or [None] * len(sections)
    if len(vectors) != len(sections):
        raise InvalidRequest(f"{len(vectors)} embeddings for {len(sections)} chunks")
    document_id = knowledge_stream(target_namespace, draft.slug)
    if current is not None and current.document_id != document_id:
        raise InvalidState(f"the current state is of document {current.document_id}, not {document_id}")
    chunks = tuple(
        KnowledgeChunk(
            chunk_id=chunk_id(document_id, version, i), heading=heading, text=text, embedding=vector
        )
        for i, ((heading, text), vector) in enumerate(zip(sections, vectors, strict=True))
    )
    return KnowledgePublished(
        document_id=document_id,
        namespace=target_namespace,
        slug=draft.slug,
        version=version,
        title=draft.title,
        body=draft.body,
        tags=draft.tags,
        content_hash=content_hash(draft),
        source=draft.source,
        published_by=identity.actor,
        chunks=chunks,
        embedding_model=embedding_model if any(v is not None for v in vectors) else None,
        at=now,
    )


def evolve_knowledge(state: KnowledgeState | None, event: Event) -> KnowledgeState:
    """A document stream holds publications, each the whole next version, and at most one
    erasure, last. ``version`` stays the last published version: the erasure took the
    stream version after it."""
    if isinstance(event, KnowledgeErased):
        if state is None or state.erased:
            raise InvalidState(f"document {event.document_id}: an erasure must follow a publication, once")
        return erased_state(state)
    if not isinstance(event, KnowledgePublished):
        raise InvalidState(f"{type(event).__name__} does not belong to a knowledge stream")
    if state is not None and state.erased:
        raise InvalidState(f"document {event.document_id}: version {event.version} after its erasure")
    expected = 1 if state is None else state.version + 1
    if event.version != expected:
        raise InvalidState(f"document {event.document_id}: version {event.version} after {expected - 1}")
    return current_state(event)


def current_state(latest: KnowledgePublished) -> KnowledgeState:
    """The state from a stream's latest event alone: each version is whole, so the latest
    publication is everything the decider needs (no fold over older bodies)."""
    return KnowledgeState(
        document_id=latest.document_id,
        namespace=latest.namespace,
        slug=latest.slug,
        version=latest.version,
        title=latest.title,
        content_hash=latest.content_hash,
        chunks=len(latest.chunks),
        shredded=latest.shredded,
    )


def erased_state(state: KnowledgeState) -> KnowledgeState:
    """What remains of an erased document: its identity and place, no content."""
    return msgspec.structs.replace(state, title="", content_hash="", chunks=0, shredded=True, erased=True)


def fold_knowledge(events: Iterable[Event]) -> KnowledgeState | None:
    """A document's state from its whole stream, oldest first (``None``: no such stream)."""
    state: KnowledgeState | None = None
    for event in events:
        state = evolve_knowledge(state, event)
    return state
