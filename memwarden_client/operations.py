"""One method per operation of the API, on ``Client`` and ``AsyncClient`` alike.

The naming rule: an operation's method is its OpenAPI ``operationId`` (snake_case:
``client.history(id=…)``, ``client.stats()``, ``client.resolve_finding(finding_id=…, decision=…)``);
its keyword arguments are the request struct's fields (``memwarden_client.requests``, the
``operationId`` in PascalCase), and it answers the struct's result type. Every list also has
``iter_<operationId>``, which yields every item, page after page. ``write_async`` is
``write`` with ``async: true`` (it answers the 202 ticket). A test holds this list to the
served document: an operation without its method fails it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from memwarden_client import requests as q
from memwarden_client.requests import PagedRequest, Request

P = ParamSpec("P")
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 - the item of a page


class SyncCaller(Protocol):
    def call(self, request: Request[R]) -> R: ...

    def iterate(self, request: PagedRequest[Any, I]) -> Iterator[I]: ...


class AsyncCaller(Protocol):
    async def call(self, request: Request[R]) -> R: ...

    def iterate(self, request: PagedRequest[Any, I]) -> AsyncIterator[I]: ...


def sync(request: Callable[P, Request[R]]) -> Callable[Concatenate[SyncCaller, P], R]:
    def method(self: SyncCaller, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.call(request(*args, **kwargs))

    method.__doc__ = request.__doc__
    return method


def sync_items(
    request: Callable[P, PagedRequest[Any, I]],
) -> Callable[Concatenate[SyncCaller, P], Iterator[I]]:
    def method(self: SyncCaller, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[I]:
        return self.iterate(request(*args, **kwargs))

    method.__doc__ = request.__doc__
    return method


def asynchronous(
    request: Callable[P, Request[R]],
) -> Callable[Concatenate[AsyncCaller, P], Coroutine[Any, Any, R]]:
    async def method(self: AsyncCaller, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self.call(request(*args, **kwargs))

    method.__doc__ = request.__doc__
    return method


def asynchronous_items(
    request: Callable[P, PagedRequest[Any, I]],
) -> Callable[Concatenate[AsyncCaller, P], AsyncIterator[I]]:
    def method(self: AsyncCaller, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[I]:
        return self.iterate(request(*args, **kwargs))

    method.__doc__ = request.__doc__
    return method


class Operations:
    """The operations, for ``Client``."""

    write = sync(q.Write)
    write_async = sync(q.WriteAsync)
    write_batch = sync(q.WriteBatch)
    write_status = sync(q.WriteStatus)
    read = sync(q.Read)
    search = sync(q.Search)
    assemble = sync(q.Assemble)
    fault = sync(q.Fault)
    history = sync(q.History)
    verify = sync(q.Verify)
    pin = sync(q.Pin)
    unpin = sync(q.Unpin)
    stats = sync(q.Stats)
    policy = sync(q.Policy)
    policy_ack = sync(q.PolicyAck)
    share = sync(q.Share)
    forget = sync(q.Forget)
    create_key = sync(q.CreateKey)
    revoke_key = sync(q.RevokeKey)
    keys = sync(q.Keys)
    namespace_policy = sync(q.NamespacePolicy)
    put_namespace_policy = sync(q.PutNamespacePolicy)
    disputes = sync(q.Disputes)
    resolve_dispute = sync(q.ResolveDispute)
    findings = sync(q.Findings)
    resolve_finding = sync(q.ResolveFinding)
    decisions = sync(q.Decisions)
    overturn_decision = sync(q.OverturnDecision)
    proposals = sync(q.Proposals)
    approve_proposal = sync(q.ApproveProposal)
    edit_proposal = sync(q.EditProposal)
    reject_proposal = sync(q.RejectProposal)
    as_of = sync(q.AsOf)
    audit = sync(q.Audit)
    verify_ledger = sync(q.VerifyLedger)
    make_checkpoint = sync(q.MakeCheckpoint)
    checkpoints = sync(q.Checkpoints)
    certificate = sync(q.Certificate)
    verify_certificate = sync(q.VerifyCertificate)
    inclusion_proof = sync(q.InclusionProof)
    consistency_proof = sync(q.ConsistencyProof)
    cosign_checkpoint = sync(q.CosignCheckpoint)
    prove = sync(q.Prove)
    projections = sync(q.Projections)
    rebuild_projection = sync(q.RebuildProjection)
    healthz = sync(q.Healthz)
    readyz = sync(q.Readyz)
    metrics = sync(q.Metrics)

    # every item of a list, page after page (its cursor followed to the end)
    iter_keys = sync_items(q.Keys)
    iter_disputes = sync_items(q.Disputes)
    iter_findings = sync_items(q.Findings)
    iter_decisions = sync_items(q.Decisions)
    iter_proposals = sync_items(q.Proposals)
    iter_as_of = sync_items(q.AsOf)
    iter_audit = sync_items(q.Audit)
    iter_checkpoints = sync_items(q.Checkpoints)


class AsyncOperations:
    """The operations, for ``AsyncClient`` (each a coroutine; ``iter_…`` async iterators)."""

    write = asynchronous(q.Write)
    write_async = asynchronous(q.WriteAsync)
    write_batch = asynchronous(q.WriteBatch)
    write_status = asynchronous(q.WriteStatus)
    read = asynchronous(q.Read)
    search = asynchronous(q.Search)
    assemble = asynchronous(q.Assemble)
    fault = asynchronous(q.Fault)
    history = asynchronous(q.History)
    verify = asynchronous(q.Verify)
    pin = asynchronous(q.Pin)
    unpin = asynchronous(q.Unpin)
    stats = asynchronous(q.Stats)
    policy = asynchronous(q.Policy)
    policy_ack = asynchronous(q.PolicyAck)
    share = asynchronous(q.Share)
    forget = asynchronous(q.Forget)
    create_key = asynchronous(q.CreateKey)
    revoke_key = asynchronous(q.RevokeKey)
    keys = asynchronous(q.Keys)
    namespace_policy = asynchronous(q.NamespacePolicy)
    put_namespace_policy = asynchronous(q.PutNamespacePolicy)
    disputes = asynchronous(q.Disputes)
    resolve_dispute = asynchronous(q.ResolveDispute)
    findings = asynchronous(q.Findings)
    resolve_finding = asynchronous(q.ResolveFinding)
    decisions = asynchronous(q.Decisions)
    overturn_decision = asynchronous(q.OverturnDecision)
    proposals = asynchronous(q.Proposals)
    approve_proposal = asynchronous(q.ApproveProposal)
    edit_proposal = asynchronous(q.EditProposal)
    reject_proposal = asynchronous(q.RejectProposal)
    as_of = asynchronous(q.AsOf)
    audit = asynchronous(q.Audit)
    verify_ledger = asynchronous(q.VerifyLedger)
    make_checkpoint = asynchronous(q.MakeCheckpoint)
    checkpoints = asynchronous(q.Checkpoints)
    certificate = asynchronous(q.Certificate)
    verify_certificate = asynchronous(q.VerifyCertificate)
    inclusion_proof = asynchronous(q.InclusionProof)
    consistency_proof = asynchronous(q.ConsistencyProof)
    cosign_checkpoint = asynchronous(q.CosignCheckpoint)
    prove = asynchronous(q.Prove)
    projections = asynchronous(q.Projections)
    rebuild_projection = asynchronous(q.RebuildProjection)
    healthz = asynchronous(q.Healthz)
    readyz = asynchronous(q.Readyz)
    metrics = asynchronous(q.Metrics)

    # every item of a list, page after page (its cursor followed to the end)
    iter_keys = asynchronous_items(q.Keys)
    iter_disputes = asynchronous_items(q.Disputes)
    iter_findings = asynchronous_items(q.Findings)
    iter_decisions = asynchronous_items(q.Decisions)
    iter_proposals = asynchronous_items(q.Proposals)
    iter_as_of = asynchronous_items(q.AsOf)
    iter_audit = asynchronous_items(q.Audit)
    iter_checkpoints = asynchronous_items(q.Checkpoints)
