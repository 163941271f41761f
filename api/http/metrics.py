"""Prometheus text exposition of a few process counters (no client library needed)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import msgspec
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from memwarden.api.http.routing import syscall_of
from memwarden.domain.model.namespaces import tenant_of

Labels = tuple[tuple[str, str], ...]


class Gauge(msgspec.Struct, frozen=True):
    """One gauge family read at scrape time: ``samples`` are (labels, value)."""

    name: str
    help: str
    samples: list[tuple[Labels, float]]


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counters: dict[str, int] = defaultdict(int)
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.tenant_requests: dict[tuple[str, str, int], int] = defaultdict(int)
        """Requests by the caller's tenant: shown to the operator's scrape and, each tenant's
        own rows only, to that tenant's scrape."""

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counters[name] += n

    def observe(
        self, method: str, route: str, status: int, seconds: float, tenant: str | None = None
    ) -> None:
        with self._lock:
            if tenant is not None:
                self.tenant_requests[(tenant, route, status)] += 1
            self.requests[(method, route, status)] += 1
            self.seconds[(method, route)] += seconds
            self.calls[(method, route)] += 1

    def render(self, gauges: Sequence[Gauge]) -> str:
        """The Prometheus text exposition format (0.0.4): one HELP and TYPE per family,
        named without labels, label values escaped."""
        with self._lock:
            requests = sorted(self.requests.items())
            seconds = sorted(self.seconds.items())
            calls = dict(self.calls)
            counters = sorted(self.counters.items())
        lines = _family("memwarden_http_requests_total", "counter", "HTTP requests answered, by status")
        lines += [
            _sample("memwarden_http_requests_total", (("method", m), ("route", r), ("status", str(c))), n)
            for (m, r, c), n in requests
        ]
        lines += _family("memwarden_http_request_seconds", "summary", "Time spent answering HTTP requests")
        for (m, r), total in seconds:
            labels = (("method", m), ("route", r))
            lines.append(_sample("memwarden_http_request_seconds_sum", labels, total))
            lines.append(_sample("memwarden_http_request_seconds_count", labels, calls[(m, r)]))
        lines += _family("memwarden_events_total", "counter", "Process events (audits, fallbacks), by kind")
        lines += [_sample("memwarden_events_total", (("event", e),), n) for e, n in counters]
        for gauge in gauges:
            lines += _family(f"memwarden_{gauge.name}", "gauge", gauge.help)
            lines += [_sample(f"memwarden_{gauge.name}", labels, v) for labels, v in gauge.samples]
        return "\n".join(lines + self._tenant_lines(None)) + "\n"

    def render_tenant(self, tenant: str) -> str:
        """A tenant's own scrape: its requests and nothing of any other tenant's."""
        return "\n".join(self._tenant_lines(tenant)) + "\n"

    def _tenant_lines(self, only: str | None) -> list[str]:
        with self._lock:
            rows = sorted(self.tenant_requests.items())
        lines = _family(
            "memwarden_tenant_http_requests_total", "counter", "HTTP requests by the caller's tenant"
        )
        return lines + [
            _sample(
                "memwarden_tenant_http_requests_total", (("tenant", t), ("route", r), ("status", str(c))), n
            )
            for (t, r, c), n in rows
            if only is None or t == only
        ]


def _family(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]


def _sample(name: str, labels: Labels, value: float) -> str:
    rendered = ",".join(f'{key}="{_escape_label(text)}"' for key, text in labels)
    return f"{name}{{{rendered}}} {_number(value)}" if labels else f"{name} {_number(value)}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


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
            route = _route_label(handler)
            metrics: Metrics = scope["app"].state["memwarden"].metrics
            call = scope.get("state", {}).get("call")
            identity = getattr(call, "identity", None)
            tenant = tenant_of(identity.namespace) if identity is not None else None
            metrics.observe(
                str(scope.get("method", "GET")), str(route), status[0], time.perf_counter() - began, tenant
            )

    return middleware


def _route_label(handler: Any) -> str:
    """A request's ``route`` label: its syscall, else its handler, else ``unmatched``."""
    if handler is None:
        return "unmatched"
    call = syscall_of(handler)
    return call.name if call is not None else str(handler.handler_name)
