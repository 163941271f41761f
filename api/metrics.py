"""Prometheus text exposition of a few process counters (no client library needed)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, int] = defaultdict(int)
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            self.seconds[(method, route)] += seconds

    def render(self, gauges: dict[str, float]) -> str:
        lines = ["# TYPE memwarden_http_requests_total counter"]
        with self._lock:
            for (method, route, status), n in sorted(self.requests.items()):
                lines.append(
                    f'memwarden_http_requests_total{{method="{method}",route="{route}",status="{status}"}} {n}'
                )
            lines.append("# TYPE memwarden_http_request_seconds_sum counter")
            for (method, route), s in sorted(self.seconds.items()):
                lines.append(
                    f'memwarden_http_request_seconds_sum{{method="{method}",route="{route}"}} {s:.6f}'
                )
            lines.append("# TYPE memwarden_events_total counter")
            for name, n in sorted(self.counters.items()):
                lines.append(f'memwarden_events_total{{event="{name}"}} {n}')
        for name, value in sorted(gauges.items()):
            lines.append(f"# TYPE memwarden_{name} gauge")
            lines.append(f"memwarden_{name} {value}")
        return "\n".join(lines) + "\n"


def metrics_middleware(app: ASGIApp) -> ASGIApp:
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if str(scope["type"]) != "http":
            await app(scope, receive, send)
            return
        began = time.perf_counter()
        status = [500]

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await app(scope, receive, capture)
        finally:
            handler: Any = scope.get("route_handler")
            route = (handler.opt.get("op") or handler.handler_name) if handler is not None else "unmatched"
            metrics: Metrics = scope["app"].state["memwarden"].metrics
            metrics.observe(
                str(scope.get("method", "GET")), str(route), status[0], time.perf_counter() - began
            )

    return middleware
