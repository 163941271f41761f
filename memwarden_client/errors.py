"""One exception class per error code of the API (``{"error": code, "detail": ...}``)."""

from __future__ import annotations


class MemwardenError(Exception):
    """An answer the API gave as an error. ``code`` is the API's code, ``status`` the HTTP
    status, ``retry_after`` the seconds it asked to wait (429, 503), if it said."""

    code = "error"

    def __init__(self, detail: str, status: int, retry_after: float | None = None) -> None:
        super().__init__(f"{self.code}: {detail}" if detail else self.code)
        self.detail = detail
        self.status = status
        self.retry_after = retry_after


class InvalidRequest(MemwardenError):
    code = "invalid_request"


class IdentityInBody(MemwardenError):
    code = "identity_in_body"


class ProvenanceNotAllowed(MemwardenError):
    code = "provenance_not_allowed"


class Unauthenticated(MemwardenError):
    code = "unauthenticated"


class Forbidden(MemwardenError):
    code = "forbidden"


class TenantSuspended(MemwardenError):
    code = "tenant_suspended"


class OutsideSubtree(MemwardenError):
    code = "outside_subtree"


class NotFound(MemwardenError):
    code = "not_found"


class NotValidThen(NotFound):
    """A time-travel read: the memory exists for you, but was not known at ``as_of`` or did
    not hold at ``valid_at`` (a memory you cannot see is a plain NotFound)."""

    code = "not_valid_then"


class VersionConflict(MemwardenError):
    code = "version_conflict"


class TooLarge(MemwardenError):
    code = "too_large"


class RateLimited(MemwardenError):
    code = "rate_limited"


class ProjectionLag(MemwardenError):
    code = "projection_lag"


class Unavailable(MemwardenError):
    code = "unavailable"


ERRORS: dict[str, type[MemwardenError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest,
        IdentityInBody,
        ProvenanceNotAllowed,
        Unauthenticated,
        Forbidden,
        TenantSuspended,
        OutsideSubtree,
        NotFound,
        NotValidThen,
        VersionConflict,
        TooLarge,
        RateLimited,
        ProjectionLag,
        Unavailable,
    )
}


def error_for(code: str, detail: str, status: int, retry_after: float | None) -> MemwardenError:
    """The exception of ``code``; a code this client does not know is a plain MemwardenError
    that keeps it."""
    cls = ERRORS.get(code)
    if cls is not None:
        return cls(detail, status, retry_after)
    error = MemwardenError(detail, status, retry_after)
    error.code = code
    return error
