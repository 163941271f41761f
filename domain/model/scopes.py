"""The namespaces a read covers, as something ``in`` can test. Pure.

An agent's scope is an enumerated set (its namespace and ancestors: it looks *up*);
compliance staff look *down* a ``Subtree`` (docs/architecture.md §7). Both engines of an as-of
answer (SQL and ledger replay) test membership through the same rule, ``is_within``.
"""

from __future__ import annotations

import msgspec

from memwarden.domain.model.namespaces import is_within


class Subtree(msgspec.Struct, frozen=True):
    """``root`` and every namespace below it, segment-wise: ``acme/eng`` holds
    ``acme/eng/x`` but not ``acme/engineering``."""

    root: str

    def __contains__(self, namespace: object) -> bool:
        return isinstance(namespace, str) and is_within(namespace, self.root)
