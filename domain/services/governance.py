"""Keys, policies, shares, pins and acknowledgements: each command decided purely and
run by the command runner (appended with its audit record), like MemoryService's.

Key and policy state is read from the ledger streams themselves (authoritative, no
projection lag), through short-lived in-process caches: a revocation or a policy
change made by this process takes effect at once, one made elsewhere within
``CACHE_SECONDS``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import NoReturn
from uuid import UUID, uuid4

from memwarden.domain.cache import TTLCache
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.ledger.entropy import new_uuid
from memwarden.domain.model.commands import WritePolicy
from memwarden.domain.model.errors import InvalidState
from memwarden.domain.model.events import AuditOutcome, PolicySet
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import (
    IssueKey,
    KeyState,
    decide_issue,
    decide_revoke,
    evolve_key,
    format_key,
    parse_key,
)
from memwarden.domain.model.memory import MemoryState
from memwarden.domain.model.namespaces import ancestors
from memwarden.domain.model.policies import (
    EffectivePolicy,
    NamespacePolicy,
    PolicyBody,
    ack_stream,
    decide_ack,
    decide_set_policy,
    effective_policy,
    policy_from_event,
    policy_stream,
)
from memwarden.domain.model.shares import decide_pin, decide_share
from memwarden.domain.services.commands import CommandRunner, Decided, Note, Retry, utcnow

CACHE_SECONDS = 1.0
MAX_ATTEMPTS = 8


class IssuedKey:
    __slots__ = ("key", "key_id", "position")

    def __init__(self, key_id: str, key: str, position: int) -> None:
        self.key_id = key_id
        self.key = key
        self.position = position


class GovernanceService:
    def __init__(
        self,
        ledger: Ledger,
        max_content_bytes: int = 16_384,
        clock: Callable[[], datetime] = utcnow,
        new_id: Callable[[], UUID] = new_uuid,
        cache_seconds: float = CACHE_SECONDS,
    ) -> None:
        self.ledger = ledger
        self.max_content_bytes = max_content_bytes
        self.clock = clock
        self.new_id = new_id
        # late-bound: a caller may swap the clock or id source after construction
        self.runner = CommandRunner(ledger, None, lambda: self.clock(), lambda: self.new_id())  # noqa: PLW0108
        self._key_secret = ledger.secret("api-keys")
        self._keys: TTLCache[str, KeyState] = TTLCache(cache_seconds)
        self._policies: TTLCache[str, EffectivePolicy] = TTLCache(cache_seconds)

    # -- keys -------------------------------------------------------------------------------

    def hash_secret(self, key_id: str, secret: str) -> str:
        message = f"{key_id}\x00{secret}".encode()
        return hmac.new(self._key_secret, message, hashlib.sha256).hexdigest()

    def issue_key(self, caller: Identity, command: IssueKey) -> IssuedKey:
        key_id, secret = uuid4().hex, secrets.token_hex(32)

        def decide(now: datetime) -> Decided[IssuedKey]:
            event = decide_issue(caller, command, key_id, self.hash_secret(key_id, secret), now)
            detail = f"key {key_id} for {command.actor} ({command.role}) in {command.target}"
            return Decided(
                result=lambda position: IssuedKey(key_id, format_key(key_id, secret), position),
                events=[event],
                note=Note(detail),
            )

        return self.runner.command(caller, "admin.keys.create", decide, Retry("the key id was taken; retry"))

    def revoke_key(self, caller: Identity, key_id: str) -> int:
        def decide(now: datetime) -> Decided[int]:
            key = self.key(key_id)
            event = decide_revoke(caller, key, now)
            assert key is not None
            return Decided(
                result=int,
                events=[event],
                versions={event.stream_id: key.version},
                note=Note(f"key {key_id}"),
            )

        retry = _refused_on_conflict("the key changed meanwhile; retry", lambda: self._keys.drop(key_id))
        return self.runner.command(caller, "admin.keys.revoke", decide, retry)

    def key(self, key_id: str) -> KeyState | None:
        """The key's authoritative state, folded from its ledger stream."""
        try:
            stream = UUID(hex=key_id)
        except ValueError:
            return None
        state: KeyState | None = None
        for recorded in self.ledger.streams([stream]).get(stream, []):
            state = evolve_key(state, recorded.event)
        return state

    def authenticate(self, presented: str) -> KeyState | None:
        """The key's state when ``presented`` is a valid, unrevoked key; else None."""
        parsed = parse_key(presented)
        if parsed is None:
            return None
        key_id, secret = parsed
        state = self._keys.get(key_id)
        if state is None:
            state = self.key(key_id)
            if state is None:
                return None
            self._keys.put(key_id, state)
        if state.revoked:
            return None
        if not hmac.compare_digest(state.key_hash, self.hash_secret(key_id, secret)):
            return None
        return state

    def cached_key(self, key_id: str) -> KeyState | None:
        """The cached state of a key, without I/O (None when not cached or expired)."""
        return self._keys.get(key_id)

    def check_cached(self, state: KeyState, secret: str) -> bool:
        return not state.revoked and hmac.compare_digest(
            state.key_hash, self.hash_secret(state.key_id, secret)
        )

    # -- policies ---------------------------------------------------------------------------

    def own_policies(self, namespace: str) -> dict[str, NamespacePolicy]:
        chain = ancestors(namespace)
        heads = self.ledger.stream_heads([policy_stream(ns) for ns in chain])
        found: dict[str, NamespacePolicy] = {}
        for head in heads.values():
            if isinstance(head.event, PolicySet):
                found[head.event.namespace] = policy_from_event(head.event, head.originator_version)
        return found

    def own_policy(self, namespace: str) -> NamespacePolicy:
        stream = policy_stream(namespace)
        head = self.ledger.stream_heads([stream]).get(stream)
        if head is not None and isinstance(head.event, PolicySet):
            return policy_from_event(head.event, head.originator_version)
        return NamespacePolicy(namespace=namespace)

    def cached_policy(self, namespace: str) -> EffectivePolicy | None:
        """The cached effective policy, without I/O (None when not cached or expired)."""
        return self._policies.get(namespace)

    def effective_policy(self, namespace: str) -> EffectivePolicy:
        cached = self._policies.get(namespace)
        if cached is not None:
            return cached
        policy = effective_policy(namespace, self.own_policies(namespace))
        self._policies.put(namespace, policy)
        return policy

    def write_policy(self, namespace: str) -> WritePolicy:
        """The ``policy_for`` of MemoryService: the effective policy's write part."""
        return self.effective_policy(namespace).write_policy(self.max_content_bytes)

    def set_policy(
        self, caller: Identity, target: str, body: PolicyBody, expected_version: int | None = None
    ) -> tuple[NamespacePolicy, int]:
        def decide(now: datetime) -> Decided[tuple[NamespacePolicy, int]]:
            current = self.own_policy(target)
            event = decide_set_policy(caller, target, body, current, expected_version, now)
            return Decided(
                result=lambda position: (policy_from_event(event, current.version + 1), position),
                events=[event],
                versions={event.stream_id: current.version},
                note=Note(target),
            )

        retry = _refused_on_conflict(f"the policy of {target!r} changed meanwhile", self._policies.clear)
        return self.runner.command(caller, "admin.policies.put", decide, retry)

    def acknowledged(self, caller: Identity, policy: EffectivePolicy) -> set[tuple[str, str]]:
        streams = {
            ack_stream(caller.namespace, caller.actor, d.namespace, d.id): (d.namespace, d.id)
            for d in policy.directives
        }
        heads = self.ledger.stream_heads(list(streams)) if streams else {}
        return {streams[s] for s in heads}

    def acknowledge(self, caller: Identity, directive_id: str) -> int:
        def decide(now: datetime) -> Decided[int]:
            event = decide_ack(caller, directive_id, self.effective_policy(caller.namespace), now)
            return Decided(
                result=int,
                events=[event],
                versions=self._version_of(event.stream_id),
                note=Note(directive_id),
            )

        retry = _refused_on_conflict("acknowledged concurrently; retry")
        return self.runner.command(caller, "policy_ack", decide, retry)

    # -- shares and pins ----------------------------------------------------------------------

    def share(self, caller: Identity, memory: MemoryState | None, with_namespace: str) -> tuple[UUID, int]:
        """Share a memory into a namespace; sharing it again is still audited (and a share
        appended meanwhile by another caller makes this one "already shared" too)."""

        def decide(now: datetime) -> Decided[tuple[UUID, int]]:
            event = decide_share(caller, memory, with_namespace, now)
            subjects = (event.memory_id,)
            if self.ledger.stream_heads([event.share_id]).get(event.share_id) is not None:
                note, events = Note(f"already shared with {with_namespace}", subjects=subjects), []
            else:
                note, events = Note(with_namespace, subjects=subjects), [event]
            return Decided(result=lambda position: (event.share_id, position), events=events, note=note)

        return self.runner.command(caller, "share", decide, Retry("the share kept changing; retry"))

    def pin(self, caller: Identity, memory_id: UUID, visible: bool, pinned: bool) -> int:
        def decide(now: datetime) -> Decided[int]:
            event = decide_pin(caller, memory_id, visible, pinned, now)
            return Decided(
                result=int,
                events=[event],
                versions=self._version_of(event.pin_id),
                note=Note("", subjects=(memory_id,)),
            )

        retry = Retry("the pin kept changing; retry", attempts=MAX_ATTEMPTS)
        return self.runner.command(caller, "pin" if pinned else "unpin", decide, retry)

    def _version_of(self, stream: UUID) -> dict[UUID, int]:
        """The stream's version as the ledger has it now (0: none yet)."""
        head = self.ledger.stream_heads([stream]).get(stream)
        return {stream: head.originator_version if head is not None else 0}

    # -- audit --------------------------------------------------------------------------------

    def record_audit(
        self, identity: Identity, op: str, outcome: AuditOutcome, detail: str, subject_id: UUID | None = None
    ) -> int:
        return self.runner.record(identity, op, outcome, detail, (subject_id,) if subject_id else ())

    def record_unauthenticated(self, op: str, detail: str) -> int:
        """A request without a valid key: audited under no identity."""
        return self.runner.record(None, op, "denied", detail)


def _refused_on_conflict(message: str, invalidate: Callable[[], None] | None = None) -> Retry:
    """One attempt: a conflict is the caller's to see (the state it acted on changed)."""

    def refuse() -> NoReturn:
        raise InvalidState(message)

    return Retry(message, attempts=1, on_conflict=refuse, invalidate=invalidate)
