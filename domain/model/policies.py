"""Policies per namespace: the own settings of each namespace, and the effective policy
of a caller (its namespace and every ancestor; the nearest setting wins, a suspension
anywhere up the chain suspends). Pure: no I/O, no clock."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from uuid import NAMESPACE_URL, UUID, uuid5

import msgspec

from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import (
    DomainError,
    Forbidden,
    InvalidRequest,
    InvalidState,
    NotFound,
    OutsideSubtree,
)
from memwarden.domain.model.events import ConflictReview, Directive, DirectiveAcknowledged, PolicySet
from memwarden.domain.model.identity import REVIEWER_ROLES, Identity
from memwarden.domain.model.namespaces import ancestors, is_within, validate_namespace
from memwarden.domain.model.storable import check_storable
from memwarden.domain.model.trust import OverCap

DEFAULT_CONFLICT_REVIEW: ConflictReview = "lower_trust"
DEFAULT_RATE_LIMIT_PER_MINUTE = 1_200
MAX_RATE_LIMIT_PER_MINUTE = 10_000_000
MAX_DIRECTIVES = 50
MAX_DIRECTIVE_TEXT = 2_000
DRIVERS = frozenset({"baseline", "lexical", "hybrid"})
_DIRECTIVE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


def policy_stream(namespace: str) -> UUID:
    return uuid5(NAMESPACE_URL, f"memwarden:policy:{namespace}")


def ack_stream(namespace: str, actor: str, directive_namespace: str, directive_id: str) -> UUID:
    return uuid5(
        NAMESPACE_URL, f"memwarden:ack:{namespace}\x00{actor}\x00{directive_namespace}\x00{directive_id}"
    )


class PolicyBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What an admin sets on a namespace (``None`` = inherit)."""

    conflict_review: ConflictReview | None = None
    forbid_secrets: bool | None = None
    rate_limit_per_minute: int | None = None
    directives: tuple[Directive, ...] = ()
    driver: str | None = None
    suspended: bool | None = None
    members_forget_own: bool | None = None
    """Members may erase (``forget``) memories they wrote themselves (default: no)."""
    provenance_over_cap: OverCap | None = None
    """A write claiming more provenance than its key may: ``cap`` (lowered, audited; default)
    or ``refuse`` (400 ``provenance_not_allowed``)."""


class NamespacePolicy(PolicyBody, frozen=True, kw_only=True):
    """A namespace's own policy as it stands (the body last set, and its stream version)."""

    namespace: str
    version: int = 0


class EffectiveDirective(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    text: str
    namespace: str


class EffectivePolicy(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    conflict_review: ConflictReview
    forbid_secrets: bool
    rate_limit_per_minute: int
    driver: str | None
    suspended: bool
    suspended_by: str | None
    directives: tuple[EffectiveDirective, ...]
    members_forget_own: bool = False
    provenance_over_cap: OverCap = "cap"

    def write_policy(self, max_content_bytes: int) -> WritePolicy:
        return WritePolicy(
            forbid_secrets=self.forbid_secrets,
            max_content_bytes=max_content_bytes,
            provenance_over_cap=self.provenance_over_cap,
            conflict_review=self.conflict_review,
        )


def policy_from_event(event: PolicySet, version: int) -> NamespacePolicy:
    fields = {name: getattr(event, name) for name in PolicyBody.__struct_fields__}
    return NamespacePolicy(namespace=event.namespace, version=version, **fields)


def effective_policy(namespace: str, own: Mapping[str, NamespacePolicy]) -> EffectivePolicy:
    """Merge the namespace's own policy with its ancestors'; the nearest setting wins.

    ``own`` must hold every ancestor that has a policy (a missing one means: none set).
    Directives accumulate from the root down; a suspension anywhere suspends.
    """
    chain = [own[ns] for ns in ancestors(namespace) if ns in own]  # nearest first

    def nearest(field: str) -> object:
        for policy in chain:
            value = getattr(policy, field)
            if value is not None:
                return value
        return None

    suspended_by = next((p.namespace for p in reversed(chain) if p.suspended), None)
    directives = tuple(
        EffectiveDirective(id=d.id, text=d.text, namespace=p.namespace)
        for p in reversed(chain)
        for d in p.directives
    )
    review = nearest("conflict_review")
    forbid = nearest("forbid_secrets")
    rate = nearest("rate_limit_per_minute")
    driver = nearest("driver")
    members_forget_own = nearest("members_forget_own")
    over_cap = nearest("provenance_over_cap")
    return EffectivePolicy(
        namespace=namespace,
        conflict_review=review if review is not None else DEFAULT_CONFLICT_REVIEW,  # type: ignore[arg-type]
        forbid_secrets=bool(forbid) if forbid is not None else True,
        rate_limit_per_minute=int(rate) if isinstance(rate, int) else DEFAULT_RATE_LIMIT_PER_MINUTE,
        driver=driver if isinstance(driver, str) else None,
        suspended=suspended_by is not None,
        suspended_by=suspended_by,
        directives=directives,
        members_forget_own=members_forget_own is True,
        provenance_over_cap="refuse" if over_cap == "refuse" else "cap",
    )


class TenantSuspended(DomainError):
    code = "tenant_suspended"


def check_not_suspended(policy: EffectivePolicy) -> None:
    """The tenant gate: a suspension on the namespace or any ancestor fails closed."""
    if policy.suspended:
        raise TenantSuspended(f"{policy.suspended_by!r} is suspended")


def check_policy_admin(caller: Identity, target: str) -> None:
    validate_namespace(target)
    if caller.role not in REVIEWER_ROLES:
        raise Forbidden(f"role {caller.role!r} may not manage policies")
    if not is_within(target, caller.namespace):
        raise OutsideSubtree(f"{target!r} is outside {caller.namespace!r}")


def decide_set_policy(
    caller: Identity,
    target: str,
    body: PolicyBody,
    current: NamespacePolicy | None,
    expected_version: int | None,
    now: datetime,
) -> PolicySet:
    check_policy_admin(caller, target)
    check_storable(body)
    version = current.version if current is not None else 0
    if expected_version is not None and expected_version != version:
        raise InvalidState(f"policy of {target!r} is at version {version}, not {expected_version}")
    if body.rate_limit_per_minute is not None and not (
        1 <= body.rate_limit_per_minute <= MAX_RATE_LIMIT_PER_MINUTE
    ):
        raise InvalidRequest(f"rate_limit_per_minute must be between 1 and {MAX_RATE_LIMIT_PER_MINUTE}")
    if body.driver is not None and body.driver not in DRIVERS:
        raise InvalidRequest(f"driver must be one of {', '.join(sorted(DRIVERS))}")
    if len(body.directives) > MAX_DIRECTIVES:
        raise InvalidRequest(f"at most {MAX_DIRECTIVES} directives")
    seen: set[str] = set()
    for directive in body.directives:
        if not _DIRECTIVE_ID.fullmatch(directive.id):
            raise InvalidRequest(f"directive id {directive.id[:70]!r} must be 1-64 of [A-Za-z0-9._:-]")
        if directive.id in seen:
            raise InvalidRequest(f"directive id {directive.id!r} appears twice")
        if not directive.text.strip() or len(directive.text) > MAX_DIRECTIVE_TEXT:
            raise InvalidRequest(f"directive text must be 1-{MAX_DIRECTIVE_TEXT} characters")
        seen.add(directive.id)
    return PolicySet(
        policy_id=policy_stream(target),
        namespace=target,
        conflict_review=body.conflict_review,
        forbid_secrets=body.forbid_secrets,
        rate_limit_per_minute=body.rate_limit_per_minute,
        directives=body.directives,
        driver=body.driver,
        suspended=body.suspended,
        members_forget_own=body.members_forget_own,
        provenance_over_cap=body.provenance_over_cap,
        set_by=caller.actor,
        at=now,
    )


def decide_ack(
    caller: Identity, directive_id: str, policy: EffectivePolicy, now: datetime
) -> DirectiveAcknowledged:
    """Acknowledge a directive that applies to the caller (its namespace or an ancestor)."""
    directive = next((d for d in policy.directives if d.id == directive_id), None)
    if directive is None:
        raise NotFound("no such directive")
    return DirectiveAcknowledged(
        ack_id=ack_stream(caller.namespace, caller.actor, directive.namespace, directive.id),
        namespace=caller.namespace,
        actor=caller.actor,
        directive_id=directive.id,
        directive_namespace=directive.namespace,
        at=now,
    )
