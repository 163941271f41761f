"""Health, readiness and metrics: no key needed, nothing audited."""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get

from api.gate import api_state

Req = Request[Any, Any, Any]
READY_MAX_LAG = 10_000


@get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", sync_to_thread=True)
def readyz(request: Req) -> Response[dict[str, Any]]:
    state = api_state(request)
    try:
        statuses = state.reads.runner.status()
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
    if problems:
        body: dict[str, Any] = {
            "error": "unavailable",
            "detail": "; ".join(problems),
            "projections": projections,
        }
        return Response(body, status_code=503, headers={"Retry-After": "1"})
    return Response({"status": "ready", "projections": projections})


@get("/metrics", sync_to_thread=True, media_type=MediaType.TEXT)
def metrics(request: Req) -> str:
    state = api_state(request)
    gauges: dict[str, float] = {}
    try:
        head = state.runtime.ledger.head_position()
        gauges["ledger_head_position"] = head
        for s in state.reads.runner.status():
            gauges[f'projection_lag{{projection="{s.name}"}}'] = s.lag
    except Exception:  # noqa: BLE001 - metrics must answer even when the database does not
        gauges["ledger_reachable"] = 0
    else:
        gauges["ledger_reachable"] = 1
    rendered: str = state.metrics.render(gauges)
    return rendered
