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


class NotValidThen(NotFound):
    """A time-travel read of a memory the caller may see, which at the asked instants was
    not yet known or did not hold. Only ever raised after the memory was found in the
    caller's scope: a memory it cannot see is a plain ``NotFound``."""

    code = "not_valid_then"


class InvalidState(DomainError):
    """The command does not apply to the aggregate in its current state."""

    code = "version_conflict"


class TooLarge(DomainError):
    code = "too_large"
