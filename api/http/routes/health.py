"""Health, readiness and metrics: no key needed, nothing audited."""

from __future__ import annotations

import hmac
from typing import Any, NamedTuple

import anyio
import anyio.to_thread
import msgspec
from litestar import Request, Response, get, head
from litestar.di import NamedDependency

from memwarden.api.http.errors import RateLimited, Unauthenticated
from memwarden.api.http.metrics import Gauge, Labels
from memwarden.api.http.state import ApiState
from memwarden.bootstrap.api import ApiProcess
from memwarden.bootstrap.tickets import WriteTickets
from memwarden.domain.ledger.app import Ledger
from memwarden.domain.model.identity import COMPLIANCE_ROLES
from memwarden.domain.model.namespaces import tenant_of
from memwarden.domain.model.passes import PassesHealth
from memwarden.domain.services.governance import GovernanceService
from memwarden.domain.settings import Settings
from memwarden.projections.autopilot.views import WorkerGauges
from memwarden.projections.reads import ReadModels

Req = Request[Any, Any, Any]
READY_MAX_LAG = 10_000


@get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@head("/healthz")
async def healthz_head() -> None:
    """What load balancers and ``curl -I`` ask: up, no body."""


@get("/readyz")
async def readyz(
    settings: NamedDependency[Settings],
    reads: NamedDependency[ReadModels],
    process: NamedDependency[ApiProcess],
) -> Response[dict[str, Any]]:
    return await bounded_readiness(settings, Readiness(reads, process))


@head("/readyz")
async def readyz_head(
    settings: NamedDependency[Settings],
    reads: NamedDependency[ReadModels],
    process: NamedDependency[ApiProcess],
) -> Response[None]:
    """The status and headers of ``GET /readyz``, no body. (Both handlers are async: with a
    HEAD handler on its path, Litestar 2.25 fails a GET handler run with ``sync_to_thread``.)"""
    ready = await bounded_readiness(settings, Readiness(reads, process))
    return Response(None, status_code=ready.status_code, headers=ready.headers)


class Readiness(NamedTuple):
    """What readiness looks at: the projections, and who runs the passes."""

    reads: NamedDependency[ReadModels]
    process: NamedDependency[ApiProcess]


async def bounded_readiness(
    settings: NamedDependency[Settings], ready: Readiness
) -> Response[dict[str, Any]]:
    """``readiness``, or not ready when the database has not answered within the database
    timeout (a frozen server never answers; its check is left to finish in its thread)."""
    seconds = settings.db_timeout_seconds
    with anyio.move_on_after(seconds):
        return await anyio.to_thread.run_sync(readiness, ready, abandon_on_cancel=True)
    silent: dict[str, Any] = {
        "error": "unavailable",
        "detail": f"the database did not answer within {seconds:g} s",
    }
    return Response(silent, status_code=503, headers={"Retry-After": "1"})


def readiness(looked_at: Readiness) -> Response[dict[str, Any]]:
    """200 when the ledger answers and every projection runs within ``READY_MAX_LAG``; else
    503. With the passes on Redis and nobody consuming them (no worker heartbeat, or messages
    waiting and none consumed, for ``worker_stale_seconds``), still 200 (writes and reads
    work; §9: the passes are delayed, not lost) but ``"status": "degraded"`` and ``detail``
    say so: never ready-and-fine while nobody runs the passes."""
    try:
        statuses = looked_at.reads.runner.status()
    except Exception as error:  # noqa: BLE001 - not ready is the answer, whatever the cause
        failed: dict[str, Any] = {
            "error": "unavailable",
            "detail": f"ledger unreachable: {type(error).__name__}",
        }
        return Response(failed, status_code=503, headers={"Retry-After": "1"})
    problems = [
        f"{s.name} stopped at {s.stopped_at}" if s.error else f"{s.name} lags by {s.lag}"
        for s in statuses
        if s.error or s.lag > READY_MAX_LAG
    ]
    projections = {
        s.name: {"position": s.position, "lag": s.lag, "stopped": s.error is not None} for s in statuses
    }
    passes = looked_at.process.passes()
    if problems:
        body: dict[str, Any] = {
            "error": "unavailable",
            "detail": "; ".join(problems),
            "projections": projections,
            "passes": msgspec.structs.asdict(passes),
        }
        return Response(body, status_code=503, headers={"Retry-After": "1"})
    ready: dict[str, Any] = {"status": "ready"}
    if not passes.consuming:
        ready = {"status": "degraded", "detail": f"the background passes are not consumed: {passes.detail}"}
    return Response({**ready, "projections": projections, "passes": msgspec.structs.asdict(passes)})


@get("/metrics", sync_to_thread=True, media_type="text/plain; version=0.0.4; charset=utf-8")
def metrics(
    request: Req,
    reads: NamedDependency[ReadModels],
    ledger: NamedDependency[Ledger],
    governance: NamedDependency[GovernanceService],
    settings: NamedDependency[Settings],
    tickets: NamedDependency[WriteTickets],
    process: NamedDependency[ApiProcess],
    edge: NamedDependency[ApiState],
) -> str:
    """The operator's scrape (``MEMWARDEN_METRICS_TOKEN``) sees everything; a tenant's
    auditor, admin or owner key sees that tenant's series only; anyone else gets 401."""
    scrape = _scraper(request, governance, settings, edge)
    if scrape != OPERATOR:
        return edge.metrics.render_tenant(scrape)
    gauges: list[Gauge] = []
    try:
        head = ledger.head_position()
        statuses = reads.runner.status()
        workers = reads.worker_gauges()
        open_tickets, oldest = tickets.open_counts()
    except Exception:  # noqa: BLE001 - metrics must answer even when the database does not
        reachable = 0
    else:
        reachable = 1
        gauges.append(Gauge("ledger_head_position", "Position of the ledger's last event", [((), head)]))
        lags: list[tuple[Labels, float]] = [((("projection", s.name),), float(s.lag)) for s in statuses]
        gauges.append(Gauge("projection_lag", "Events a projection is behind the ledger head", lags))
        gauges.extend(_worker_gauges(head, workers))
        gauges.extend(_ticket_gauges(open_tickets, oldest))
    gauges.extend(_passes_gauges(process.passes()))
    depth = process.queue_depth()
    gauges.append(
        Gauge("worker_queue_depth", "Messages queued for the workers (Redis), or unsent in-process", depth)
    )
    gauges.append(Gauge("ledger_reachable", "1 when the ledger answered this scrape", [((), reachable)]))
    spool = ledger.audit_spool
    if spool is not None:
        counts: list[tuple[Labels, float]] = [
            ((("state", "kept"),), spool.kept),
            ((("state", "appended"),), spool.appended),
        ]
        gauges.append(
            Gauge(
                "audit_spool_records",
                "Audit records this process spooled while the ledger took no writes, and appended since",
                counts,
            )
        )
    rendered: str = edge.metrics.render(gauges)
    return rendered


OPERATOR = "/operator"
"""The scrape that sees every tenant (no tenant is named so: a tenant holds no '/')."""


def _scraper(
    request: Req,
    governance: NamedDependency[GovernanceService],
    settings: NamedDependency[Settings],
    edge: NamedDependency[ApiState],
) -> str:
    """``OPERATOR``, or the tenant whose key scrapes; Unauthenticated (401) otherwise. Failed
    guesses are throttled like any other authentication."""
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    presented = presented.strip() if scheme.lower() == "bearer" else ""
    token = settings.metrics_token
    if token and presented and hmac.compare_digest(presented.encode(), token.encode()):
        return OPERATOR
    attempt = edge.auth_throttle.attempt(request.client.host if request.client else None, presented)
    wait = attempt.retry_after()
    if wait:
        raise RateLimited("too many failed authentications from here; wait before trying again", wait)
    key = governance.authenticate(presented) if attempt.parsed else None
    if key is not None and key.role in COMPLIANCE_ROLES:
        return tenant_of(key.namespace)
    if presented:
        attempt.failed()
    raise Unauthenticated("the metrics token, or an auditor, admin or owner key of a tenant, is required")


def _worker_gauges(head: int, workers: WorkerGauges) -> list[Gauge]:
    dispatch: list[tuple[Labels, float]] = [
        ((("dispatcher", name),), head - at) for name, at in workers.dispatch_positions.items()
    ]
    judged: list[tuple[Labels, float]] = [
        ((("outcome", outcome),), n) for outcome, n in sorted(workers.judged.items())
    ]
    drafts: list[tuple[Labels, float]] = [
        ((("drafter", drafter), ("fallback", fallback)), n)
        for (drafter, fallback), n in sorted(workers.drafts.items())
    ]
    return [
        Gauge("dispatch_lag", "Events a worker dispatcher is behind the ledger head", dispatch),
        Gauge(
            "consolidation_proposals",
            "Proposals by the drafter that drafted them, and why the model drafter did not (fallback)",
            drafts,
        ),
        Gauge("autopilot_memories", "Memories by the outcome of their latest autopilot pass", judged),
        Gauge(
            "autopilot_unjudged", "Current memories the autopilot has not judged", [((), workers.unjudged)]
        ),
        Gauge(
            "autopilot_open_findings", "Contradictions waiting for a reviewer", [((), workers.open_findings)]
        ),
        Gauge(
            "lease_takeovers", "Worker leases taken over from another holder", [((), workers.lease_takeovers)]
        ),
    ]


def _passes_gauges(passes: PassesHealth) -> list[Gauge]:
    runner = (("runner", passes.runner),)
    gauges = [
        Gauge(
            "passes_consuming",
            "1 while someone consumes the background passes; 0 when no worker has beaten, or"
            " messages wait and none was consumed, for the stale time (MEMWARDEN_WORKER_STALE_SECONDS)",
            [(runner, 1.0 if passes.consuming else 0.0)],
        )
    ]
    if passes.workers is not None:
        gauges.append(
            Gauge("workers_alive", "Workers with a live heartbeat in Redis", [((), passes.workers)])
        )
    if passes.idle_seconds is not None:
        gauges.append(
            Gauge(
                "workers_idle_seconds",
                "Seconds since a live worker last consumed a message (or started)",
                [((), passes.idle_seconds)],
            )
        )
    return gauges


def _ticket_gauges(open_tickets: dict[str, int], oldest: float) -> list[Gauge]:
    by_state: list[tuple[Labels, float]] = [((("state", s),), n) for s, n in sorted(open_tickets.items())]
    return [
        Gauge("write_tickets_open", "Async write tickets not yet applied, by state", by_state),
        Gauge(
            "write_tickets_oldest_open_seconds",
            "Age of the oldest async write ticket not yet applied (0: none)",
            [((), oldest)],
        ),
    ]


HEALTH_ROUTES = [healthz, healthz_head, readyz, readyz_head, metrics]
"""The public routes: no key, nothing audited (``PUBLIC_PATHS`` in api/http/app.py)."""
