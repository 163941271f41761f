"""Dramatiq on Redis: the broker of one deployment and the autopilot actor.

The actor takes ids (the memory's, and its ledger position as a lower bound for the read
models to reach) and calls the plain pass (domain/services/autopilot.py), which is
idempotent: a redelivery changes nothing. ``LeaseBusy`` (another pass has the namespace)
and ``LeaseLost`` (the lease was taken over mid-pass) send the message back for a retry
with backoff for as long as a lease can last, and longer (so do a database that does not
answer and read models still catching up): a lease left behind by a worker
killed mid-pass holds its namespace until it expires, and a message that gave up before
then would be lost for good (consolidation of that namespace would wait for its next
write). Any other failure is retried by Dramatiq with backoff, ``MAX_RETRIES`` times.
Every pass is logged as one line (workers/logs.py).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any
from uuid import UUID

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from memwarden.domain.ledger.checkpoints import Checkpoint
from memwarden.domain.ledger.database import unavailable
from memwarden.domain.model.errors import DomainError
from memwarden.domain.model.leases import LeaseBusy, LeaseLost
from memwarden.domain.model.namespaces import validate_namespace
from memwarden.domain.services.autopilot import AutopilotService, PassResult
from memwarden.domain.services.checkpoints import CheckpointService
from memwarden.domain.services.consolidation import ConsolidationResult, ConsolidationService
from memwarden.domain.settings import Settings, deployment_key
from memwarden.projections.runner import ProjectionLag
from memwarden.workers.logs import pass_line
from memwarden.workers.tickets import TicketState, TicketStore, Write, apply_ticket

log = logging.getLogger(__name__)
AUTOPILOT_QUEUE = "autopilot"
MAINTENANCE_QUEUE = "maintenance"
"""Consolidation and checkpoints: long passes, on a queue and worker threads of their own,
so one never holds up the autopilot's (a consolidation pass reads 500 memories' neighbours)."""
AUTOPILOT_ACTOR = "autopilot_memory"
AUTOPILOT_BATCH_ACTOR = "autopilot_memories"
CONSOLIDATION_ACTOR = "consolidate_namespace"
CHECKPOINT_ACTOR = "checkpoint_ledger"
TICKETS_QUEUE = "tickets"
"""Async writes have a queue of their own: a caller waits on them, not behind a backlog of
autopilot passes."""
TICKET_ACTOR = "write_ticket"
QUEUES = (AUTOPILOT_QUEUE, MAINTENANCE_QUEUE, TICKETS_QUEUE)
MAX_RETRIES = 50
"""Retries of a message whose pass failed for any other reason (a bug's exception): about
a minute and a half of backoff, then it is dead-lettered and its pass line says why."""
MAX_WAIT_RETRIES = 2_000
"""Retries of a message that waits for something that ends by itself: its namespace's lease
(held by a live pass, or left by a dead holder until it expires), a database that does not
answer, read models still catching up. At up to ``MAX_BACKOFF_MS`` apart that is about an
hour, far longer than any lease: such a message is never given up for them (consolidation
has no sweep that would send its namespace again)."""
MIN_BACKOFF_MS = 100
MAX_BACKOFF_MS = 2_000
MAINTENANCE_CHANCE = 50_000
"""Commands in a million that also run the queue's maintenance (Dramatiq's default: 1000):
a dead worker's messages are found within seconds, for a cheap script on Redis."""


def holder_id() -> str:
    """Who holds a lease: this process, unique even when a pid is reused."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def redis_broker(settings: Settings, client: redis.Redis | None = None) -> RedisBroker:
    """The deployment's broker: its keys live under the deployment's prefix, so deployments
    (and test databases) sharing a Redis never take each other's messages. The messages of
    a worker that died (``kill -9``) go back to the queue once its heartbeat is missed and
    a maintenance run (``MAINTENANCE_CHANCE``) finds it."""
    if client is None and settings.redis_url is None:
        raise ValueError("REDIS_URL is not set: the passes run inside `memwarden serve`, no broker")
    return RedisBroker(  # type: ignore[no-untyped-call]
        url=None if client is not None else settings.redis_url,
        client=client,
        namespace=f"{deployment_key(settings)}:dramatiq",
        heartbeat_timeout=int(settings.worker_heartbeat_seconds * 1000),
        maintenance_chance=MAINTENANCE_CHANCE,
    )


def redis_reachable(settings: Settings) -> bool:
    """Does the Redis ``REDIS_URL`` names answer? (False when it is unset: never a probe of
    a default address.)"""
    if settings.redis_url is None:
        return False
    broker = redis_broker(settings)
    try:
        broker.client.ping()
    except (redis.RedisError, OSError):  # refused, unknown host, timeout: not reachable
        return False
    finally:
        broker.close()
    return True


def run_pass(autopilot: AutopilotService, holder: str, memory_id: Any, position: Any) -> PassResult | None:
    """One message's work. A message whose arguments are not an id and a position (not
    ours, or damaged) is dropped with a log line: retrying it could never succeed."""
    try:
        memory = UUID(str(memory_id))
        at = int(position)
    except (TypeError, ValueError):
        log.warning("autopilot: dropped a message that names no memory")
        return None
    return autopilot.judge_memory(memory, at, holder)


MAX_BATCH_IDS = 256
"""A batch message naming more memories than this is not ours: dropped."""


def run_batch(
    autopilot: AutopilotService, holder: str, memory_ids: Any, position: Any
) -> list[PassResult] | None:
    """One batch message's work (the dispatcher's memories of a namespace); a damaged one
    is dropped with a log line."""
    try:
        ok = isinstance(memory_ids, list) and 0 < len(memory_ids) <= MAX_BATCH_IDS
        memories = [UUID(str(m)) for m in memory_ids] if ok else []
        at = int(position)
    except (TypeError, ValueError):
        memories = []
    if not memories:
        log.warning("autopilot: dropped a batch message that names no memories")
        return None
    return autopilot.judge_memories(memories, at, holder, take_along=True)


def declare_autopilot(
    broker: RedisBroker, autopilot: Callable[[], AutopilotService], holder: str
) -> dramatiq.Actor[Any, Any]:
    """The autopilot actor on ``broker`` for one memory (the sweep's); ``autopilot`` gives
    the service (opened by the worker process; a sender never calls it)."""

    def autopilot_memory(memory_id: str, position: int) -> None:
        _logged_pass(
            "autopilot", None, position, lambda: run_pass(autopilot(), holder, memory_id, position), _judged
        )

    return _declared(broker, AUTOPILOT_ACTOR, autopilot_memory)


def declare_autopilot_batches(
    broker: RedisBroker, autopilot: Callable[[], AutopilotService], holder: str
) -> dramatiq.Actor[Any, Any]:
    """The autopilot actor on ``broker`` for a batch of a namespace's memories (the
    dispatcher's): one lease take and one fenced append for them all."""

    def autopilot_memories(memory_ids: list[str], position: int, namespace: str | None = None) -> None:
        _logged_pass(
            "autopilot",
            namespace,
            position,
            lambda: run_batch(autopilot(), holder, memory_ids, position),
            _judged,
        )

    return _declared(broker, AUTOPILOT_BATCH_ACTOR, autopilot_memories)


def run_consolidation(
    consolidation: ConsolidationService, holder: str, namespace: Any, position: Any
) -> ConsolidationResult | None:
    """One consolidation message's work; a damaged one (no namespace, no position) is
    dropped with a log line."""
    try:
        name = validate_namespace(str(namespace)) if isinstance(namespace, str) else None
        at = int(position)
    except (TypeError, ValueError, DomainError):
        name = None
    if name is None:
        log.warning("consolidation: dropped a message that names no namespace")
        return None
    return consolidation.consolidate(name, at, holder)


def declare_consolidation(
    broker: RedisBroker, consolidation: Callable[[], ConsolidationService], holder: str
) -> dramatiq.Actor[Any, Any]:
    """The consolidation actor on ``broker`` (a namespace and a position): idempotent, as
    a cluster is proposed once."""

    def consolidate_namespace(namespace: str, position: int) -> None:
        _logged_pass(
            "consolidation",
            namespace,
            position,
            lambda: run_consolidation(consolidation(), holder, namespace, position),
            _consolidated,
        )

    return _declared(broker, CONSOLIDATION_ACTOR, consolidate_namespace, MAINTENANCE_QUEUE)


def run_checkpoint(checkpoints: CheckpointService, holder: str) -> Checkpoint | None:
    """The checkpoint pass: one when due. Another pass holding (or taking over) its lease
    is making it: nothing to retry, the next tick looks again."""
    try:
        return checkpoints.periodic(holder)
    except (LeaseBusy, LeaseLost) as error:
        log.info("checkpoints: %s", error)
        return None


def declare_checkpoints(
    broker: RedisBroker, checkpoints: Callable[[], CheckpointService], holder: str
) -> dramatiq.Actor[Any, Any]:
    """The checkpoint actor on ``broker`` (no arguments): idempotent, as a checkpoint that
    is no longer due is not made again."""

    def checkpoint_ledger() -> None:
        _logged_pass("checkpoint", None, None, lambda: run_checkpoint(checkpoints(), holder), _checkpointed)

    return _declared(broker, CHECKPOINT_ACTOR, checkpoint_ledger, MAINTENANCE_QUEUE)


def run_ticket(store: TicketStore, write: Write, ticket: Any) -> TicketState | None:
    """One ticket message's work (``apply_ticket``); a message that names no ticket is
    dropped with a log line."""
    try:
        ticket_id = UUID(str(ticket))
    except ValueError:
        log.warning("tickets: dropped a message that names no ticket")
        return None
    return apply_ticket(store, write, ticket_id)


def declare_tickets(
    broker: RedisBroker, store: Callable[[], TicketStore], write: Callable[[], Write]
) -> dramatiq.Actor[Any, Any]:
    """The async write actor on ``broker`` (a ticket id): idempotent, as the ticket is
    claimed in its table before it runs. ``store`` and ``write`` are opened by the worker
    process; a sender never calls them."""

    def write_ticket(ticket: str) -> None:
        _logged_pass("write_ticket", None, None, lambda: run_ticket(store(), write(), ticket), _ticket)

    return _declared(broker, TICKET_ACTOR, write_ticket, queue=TICKETS_QUEUE)


class TicketSender:
    """How an API process hands a committed ticket to ``memwarden worker``: a send on the
    deployment's broker, quick to fail when Redis does not answer (the caller then runs
    the ticket itself)."""

    def __init__(self, settings: Settings) -> None:
        if settings.redis_url is None:
            raise ValueError("MEMWARDEN_TICKETS=queue needs REDIS_URL")
        client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=1.0, socket_timeout=2.0)
        self.broker = redis_broker(settings, client)
        self.actor = declare_tickets(self.broker, _no_store, _no_write)

    def send(self, ticket: UUID) -> None:
        self.actor.send(str(ticket))

    def close(self) -> None:
        self.broker.close()


def _no_store() -> TicketStore:
    raise RuntimeError("a ticket sender runs no ticket")


def _no_write() -> Write:
    raise RuntimeError("a ticket sender runs no ticket")


class LeaseRetry(dramatiq.Retry):
    """Another pass holds the namespace's lease (or took it over): again with backoff, for
    as long as ``MAX_LEASE_RETRIES`` allows."""


def retry_when(retries: int, error: BaseException) -> bool:
    """Dramatiq's question after a failed attempt: try again? A wait that ends by itself
    (a lease, the database, the read models), for about an hour; anything else,
    ``MAX_RETRIES`` times."""
    if isinstance(error, (LeaseRetry, ProjectionLag)) or unavailable(error):
        return retries < MAX_WAIT_RETRIES
    return retries < MAX_RETRIES


def _logged_pass(
    pass_name: str,
    namespace: str | None,
    position: int | None,
    work: Callable[[], Any],
    summary: Callable[[Any], tuple[str, dict[str, Any]]],
) -> None:
    """Run one message's pass and log it as one line: what it did, or that it waits for a
    lease (``LeaseRetry``), or that it failed (re-raised: Dramatiq retries it)."""
    began = time.monotonic()
    try:
        done = work()
    except (LeaseBusy, LeaseLost) as error:  # another pass has the namespace: again with backoff
        pass_line(
            pass_name,
            namespace,
            position,
            "leased",
            time.monotonic() - began,
            error=error.code,
            detail=str(error),
        )
        raise LeaseRetry(str(error)) from error
    except Exception as error:
        pass_line(
            pass_name, namespace, position, "failed", time.monotonic() - began, error=type(error).__name__
        )
        raise
    result, fields = summary(done)
    ns = fields.pop("namespace", None) or namespace
    pass_line(pass_name, ns, position, result, time.monotonic() - began, **fields)


DROPPED: tuple[str, dict[str, Any]] = ("dropped", {})
"""A message that names nothing a pass can run (logged already by its ``run_*``)."""


def _judged(results: PassResult | list[PassResult] | None) -> tuple[str, dict[str, Any]]:
    if results is None:
        return DROPPED
    batch = results if isinstance(results, list) else [results]
    outcomes: dict[str, int] = {}
    for r in batch:
        key = r.outcome or "already"
        outcomes[key] = outcomes.get(key, 0) + 1
    return "done", {
        "memories": len(batch),
        "outcomes": ",".join(f"{k}:{n}" for k, n in sorted(outcomes.items())),
        "pairs": sum(r.pairs for r in batch),
        "findings": sum(r.findings for r in batch),
        "settled": sum(r.settled for r in batch),
    }


def _consolidated(result: ConsolidationResult | None) -> tuple[str, dict[str, Any]]:
    if result is None:
        return DROPPED
    return "done", {
        "namespace": result.namespace,
        "clusters": result.clusters,
        "drafted": len(result.drafted),
    }


def _checkpointed(checkpoint: Checkpoint | None) -> tuple[str, dict[str, Any]]:
    if checkpoint is None:
        return "not_due", {}
    return "made", {"signed_position": checkpoint.position}


def _ticket(state: TicketState | None) -> tuple[str, dict[str, Any]]:
    return DROPPED if state is None else ("done", {"state": state})


def _declared(
    broker: RedisBroker, name: str, fn: Callable[..., None], queue: str = AUTOPILOT_QUEUE
) -> dramatiq.Actor[Any, Any]:
    declare = dramatiq.actor(
        broker=broker,
        actor_name=name,
        queue_name=queue,
        retry_when=retry_when,
        min_backoff=MIN_BACKOFF_MS,
        max_backoff=MAX_BACKOFF_MS,
    )
    actor: dramatiq.Actor[Any, Any] = declare(fn)
    return actor
