"""The embedding a new memory is sealed with: computed once, before the append, by the model
the search index serves, so both search lanes find the memory at once and a replay never
re-embeds."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import msgspec

from memwarden.domain.embedding import Embedder, EmbedderUnavailable, embed_rows, uncached, vector_to_bytes
from memwarden.domain.model.events import Event, MemoryWritten

log = logging.getLogger(__name__)


class Vectors(dict[str, bytes | None]):
    """Vectors by text, all of one model (``model``; None while there are none)."""

    def __init__(self, model: str | None = None) -> None:
        super().__init__()
        self.model = model


class Embedding:
    """What new memories are embedded by, and the embedding of a command's events."""

    def __init__(
        self, configured: Embedder | None, serving: Callable[[], Embedder | None] | None = None
    ) -> None:
        self.configured = configured
        self.serving = serving
        """The embedder of the model the search index serves (given by the composition root,
        which has the read models); without it, the configured one."""

    @property
    def embedder(self) -> Embedder | None:
        """The served model's embedder, so the vector lane finds new memories at once (a new
        configured model waits for the switch)."""
        serving = self.serving
        return serving() if serving is not None else self.configured

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
            vectors.update(embed(embedder, missing))
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


def embed(embedder: Embedder, texts: list[str]) -> Vectors:
    """The vectors of ``texts`` in one call; None for each when the embedder is unavailable."""
    vectors = Vectors(model=embedder.model_id)
    try:
        rows = embed_rows(uncached(embedder), texts)
        vectors.update((text, vector_to_bytes(row)) for text, row in zip(texts, rows, strict=True))
    except EmbedderUnavailable as error:
        log.warning("embedder unavailable, memory stored without a vector: %s", error)
        vectors.update(dict.fromkeys(texts))
    return vectors
