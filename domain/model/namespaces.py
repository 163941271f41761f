"""Namespaces: `/`-separated paths whose first segment is the tenant."""

from __future__ import annotations

import re

from memwarden.domain.model.errors import InvalidRequest
from memwarden.domain.model.text import invisible_character, mixed_script, quote_text, storable_text_problem

MAX_NAMESPACE_LENGTH = 255
MAX_DEPTH = 16
_SEGMENT = re.compile(r"[^\s/\x00-\x1f]{1,64}")
_PATH_OPERATORS = frozenset({".", ".."})


def validate_namespace(namespace: str) -> str:
    """Return the namespace unchanged, or raise InvalidRequest naming what is wrong.

    ``.`` and ``..`` are never segments: they would read as path operators where a
    subtree is resolved relative to a caller (``forget``), so no namespace may be named so.
    """
    if not isinstance(namespace, str) or not namespace:
        raise InvalidRequest("namespace must be a non-empty string")
    if len(namespace) > MAX_NAMESPACE_LENGTH:
        raise InvalidRequest(f"namespace longer than {MAX_NAMESPACE_LENGTH} characters")
    segments = namespace.split("/")
    if len(segments) > MAX_DEPTH:
        raise InvalidRequest(f"namespace deeper than {MAX_DEPTH} segments")
    for segment in segments:
        if not _SEGMENT.fullmatch(segment):
            raise InvalidRequest(
                f"namespace segment {quote_text(segment)} must be 1-64 characters without '/' or spaces"
            )
        if segment in _PATH_OPERATORS:
            raise InvalidRequest(f"namespace segment {segment!r} is a path operator, not a name")
    problem = storable_text_problem(namespace)
    if problem is not None:
        raise InvalidRequest(f"namespace {problem}")
    _check_looks_as_it_reads(namespace)
    return namespace


def _check_looks_as_it_reads(namespace: str) -> None:
    """A namespace is an access boundary: ``acme/hr/bots`` followed by U+200B, or ``acme`` with
    a Cyrillic ``a``, would pass for another one in every listing and audit record."""
    hidden = invisible_character(namespace)
    if hidden is not None:
        raise InvalidRequest(f"namespace contains an invisible character (U+{ord(hidden):04X})")
    scripts = mixed_script(namespace)
    if scripts is not None:
        raise InvalidRequest(f"namespace mixes {scripts[0]} and {scripts[1]} letters in one word")


def ancestors(namespace: str) -> tuple[str, ...]:
    """The namespace itself and each `/`-split ancestor, nearest first."""
    segments = namespace.split("/")
    return tuple("/".join(segments[:i]) for i in range(len(segments), 0, -1))


ANONYMOUS_TENANT = "/anonymous"
"""The tenant of what no namespace names (the audit record of a request without a valid
key): no tenant, since no namespace's first segment can hold a '/'."""


def tenant_of(namespace: str) -> str:
    return namespace.split("/", 1)[0]


def is_within(namespace: str, root: str) -> bool:
    """True when ``namespace`` is ``root`` or one of its descendants (segment-wise)."""
    return namespace == root or namespace.startswith(root + "/")


def subtree_like_pattern(root: str) -> str:
    """A LIKE pattern (escape character ``\\``) matching strict descendants of ``root``."""
    escaped = root.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "/%"
