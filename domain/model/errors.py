"""Domain errors. Each names the API error code it maps to (see api/http/errors.py)."""

from __future__ import annotations


class DomainError(Exception):
    """A rule refused the command. ``code`` is the stable machine-readable reason."""

    code = "invalid_request"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(DomainError):
    code = "invalid_request"


class IdentityInBody(DomainError):
    code = "identity_in_body"


class ProvenanceNotAllowed(DomainError):
    code = "provenance_not_allowed"


class Forbidden(DomainError):
    code = "forbidden"


class OutsideSubtree(DomainError):
    code = "outside_subtree"


class NotFound(DomainError):
    code = "not_found"


class InvalidState(DomainError):
    """The command does not apply to the aggregate in its current state."""

    code = "version_conflict"


class TooLarge(DomainError):
    code = "too_large"
