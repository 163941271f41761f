"""What every extractor offers, and how it says it could not."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

EXTRACTOR_FAILED = "extractor_failed"
OVER_BUDGET = "over_budget"


class ExtractionFailed(Exception):
    """No facts: the content is stored verbatim instead.

    ``reason`` is what the write's result and audit record say: ``over_budget``, or
    ``extractor_failed: <kind>`` (``unreachable``, ``timeout``, ``http_error``,
    ``too_large``, ``bad_response``, ``bad_output``, ``empty``, ``invalid_text``). The
    message says more, for the log; it may quote the endpoint, never the content.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    @classmethod
    def failed(cls, kind: str, message: str) -> ExtractionFailed:
        return cls(f"{EXTRACTOR_FAILED}: {kind}", message)

    @classmethod
    def over_budget(cls, message: str) -> ExtractionFailed:
        return cls(OVER_BUDGET, message)


@runtime_checkable
class Extractor(Protocol):
    def extract(self, content: str) -> tuple[str, ...]:
        """The short, self-contained facts in ``content``: at least one, each a distinct
        storable text. Raises :class:`ExtractionFailed` when it cannot."""
        ...
