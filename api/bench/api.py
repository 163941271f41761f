"""`memwarden bench api`: write and read over HTTP (a real `memwarden serve` process on
loopback, on a scratch database) next to the same operations in-process without HTTP,
measured in the same run. Target: HTTP adds at most 1 ms to p50."""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from uuid import UUID

import httpx
import msgspec

from api.bench.common import RunStats, run_threads, scratch_database
from api.bench.write import sentence
from api.runtime import Runtime, api_runtime
from domain.model.identity import Identity
from domain.model.keys import IssueKey
from domain.model.policies import PolicyBody

TARGET_OVERHEAD_MS = 1.0
TENANT = "benchapi"


class ApiBenchRow(msgspec.Struct, frozen=True):
    op: str
    clients: int
    http: RunStats
    in_process: RunStats
    overhead_p50_ms: float
    target_ms: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(env: dict[str, str], port: int, workers: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "api.cli", "serve", "--port", str(port), "--workers", str(workers)]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server process
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)  # noqa: S603
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"memwarden serve exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("memwarden serve did not become ready")


def run_api_bench(args: argparse.Namespace) -> int:
    counts = [int(c) for c in str(args.clients).split(",") if c.strip()]
    rows: list[ApiBenchRow] = []
    with scratch_database("memwarden_bench_api") as (scratch, _params):
        # Like an API process of `memwarden serve`: the served projector projects for both sides.
        settings = msgspec.structs.replace(scratch, pool_size=max(counts) + 4, projector="external")
        with api_runtime(settings) as runtime:
            operator = Identity(TENANT, "operator@bench", "owner")
            governance = runtime.core.governance
            governance.set_policy(operator, TENANT, PolicyBody(rate_limit_per_minute=10_000_000))
            keys: dict[int, str] = {}
            identities: dict[int, Identity] = {}
            for i in range(max(counts) * 2):
                namespace = f"{TENANT}/c{i}"
                keys[i] = governance.issue_key(
                    operator, IssueKey(target=namespace, actor=f"bot{i}", role="agent")
                ).key
                identities[i] = Identity(namespace, f"bot{i}", "agent")
            env = {
                **os.environ,
                "DATABASE_URL": settings.database_url or "",
                "MEMWARDEN_DATA_DIR": str(settings.data_dir),
                "MEMWARDEN_POOL_SIZE": str(max(counts) + 4),
            }
            port = _free_port()
            server = _serve(env, port, args.server_workers)
            try:
                base = f"http://127.0.0.1:{port}"
                floor, httpx_floor = _http_floor(base, port, args.seconds)
                for clients in counts:
                    rows.extend(_measure(runtime, port, keys, identities, clients, args.seconds))
            finally:
                server.terminate()
                server.wait(timeout=30)
            report = runtime.ledger.verify()
    if args.json:
        sys.stdout.write(
            msgspec.json.encode(
                {"rows": rows, "http_floor": floor, "httpx_floor": httpx_floor, "chain_ok": report.ok}
            ).decode()
            + "\n"
        )
    else:
        _print(rows, report.ok, report.checked)
        sys.stdout.write(
            f"HTTP floor (GET /healthz, no auth, no database; 1 client): p50 {floor.p50_ms:.3f} ms, "
            f"p95 {floor.p95_ms:.3f} ms, {floor.per_second:.0f} req/s; with httpx as the client: "
            f"p50 {httpx_floor.p50_ms:.3f} ms\n"
        )
    return 0 if report.ok else 1


class KeepAliveClient:
    """One persistent HTTP/1.1 connection (the standard library's ``http.client``).

    The client runs on the same two cores as the server: a light one keeps the client's own
    cost (httpx costs about 0.35 ms a request more) out of what HTTP is said to add.
    """

    def __init__(self, port: int, key: str | None = None) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self._headers = {"Content-Type": "application/json"}
        if key is not None:
            self._headers["Authorization"] = f"Bearer {key}"

    def call(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        payload = msgspec.json.encode(body) if body is not None else None
        try:
            return self._exchange(method, path, payload)
        except (ConnectionError, http.client.HTTPException):
            # The server closes a connection left idle past its keep-alive time: reconnect once.
            self._connection.close()
            return self._exchange(method, path, payload)

    def _exchange(self, method: str, path: str, payload: bytes | None) -> tuple[int, bytes]:
        self._connection.request(method, path, body=payload, headers=self._headers)
        response = self._connection.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        self._connection.close()


def _http_floor(base: str, port: int, seconds: float) -> tuple[RunStats, RunStats]:
    """``GET /healthz`` (no key, no database) with the bench's client and with httpx."""
    light, heavy = KeepAliveClient(port), httpx.Client(base_url=base, timeout=30)
    try:
        return (
            run_threads(
                "HTTP floor", 1, min(2.0, seconds), lambda _i: lambda _n: light.call("GET", "/healthz")
            ),
            run_threads(
                "HTTP floor (httpx)", 1, min(2.0, seconds), lambda _i: lambda _n: heavy.get("/healthz")
            ),
        )
    finally:
        light.close()
        heavy.close()


def _measure(
    runtime: Runtime,
    port: int,
    keys: dict[int, str],
    identities: dict[int, Identity],
    clients: int,
    seconds: float,
) -> list[ApiBenchRow]:
    # HTTP clients use keys [0, clients), in-process callers use [clients, 2*clients): separate namespaces.
    http_clients = {i: KeepAliveClient(port, keys[i]) for i in range(clients)}
    written: dict[int, list[UUID]] = {i: [] for i in range(clients * 2)}
    tag = f"{clients}-{time.monotonic_ns()}"

    def http_write(index: int) -> Callable[[int], None]:
        client = http_clients[index]

        def work(n: int) -> None:
            cmd = sentence(index, n)
            status, data = client.call("POST", "/v1/mem/write", {"content": f"{cmd.content} [{tag}]"})
            if status != 200:
                raise RuntimeError(f"HTTP write failed: {status} {data[:300]!r}")
            written[index].append(UUID(msgspec.json.decode(data)["id"]))

        return work

    def local_write(index: int) -> Callable[[int], None]:
        identity = identities[clients + index]

        def work(n: int) -> None:
            cmd = sentence(index, n)
            result = runtime.memory.write(
                identity,
                msgspec.structs.replace(
                    cmd, content=f"{cmd.content} [{tag}]", subject=None, attribute=None, value=None
                ),
            )
            assert result.id is not None
            written[clients + index].append(result.id)

        return work

    def http_read(index: int) -> Callable[[int], None]:
        client, ids = http_clients[index], written[index]

        def work(n: int) -> None:
            status, data = client.call("POST", "/v1/mem/read", {"id": str(ids[n % len(ids)])})
            if status != 200:
                raise RuntimeError(f"HTTP read failed: {status} {data[:300]!r}")

        return work

    def local_read(index: int) -> Callable[[int], None]:
        identity, ids = identities[clients + index], written[clients + index]

        def work(n: int) -> None:  # the same work as the route: scoped read, then its audit record
            memory_id = ids[n % len(ids)]
            if runtime.reads.read(identity, memory_id) is None:
                raise RuntimeError("in-process read missed")
            runtime.core.governance.record_audit(identity, "read", "ok", "", memory_id)

        return work

    rows = []
    try:
        run_threads("warm-up", clients, min(1.0, seconds), http_write)
        run_threads("warm-up", clients, min(1.0, seconds), local_write)
        results: dict[str, tuple[RunStats, RunStats]] = {}
        for op, over_http, local in (("write", http_write, local_write), ("read", http_read, local_read)):
            http_stats = run_threads(f"HTTP {op}", clients, seconds, over_http)
            local_stats = run_threads(f"in-process {op}", clients, seconds, local)
            results[op] = (http_stats, local_stats)
        if results["read"][1].operations:
            runtime.reads.wait_for(runtime.ledger.head_position())
        for op, (http_stats, local_stats) in results.items():
            overhead = round(http_stats.p50_ms - local_stats.p50_ms, 3)
            rows.append(ApiBenchRow(op, clients, http_stats, local_stats, overhead, TARGET_OVERHEAD_MS))
    finally:
        for client in http_clients.values():
            client.close()
    return rows


def _print(rows: list[ApiBenchRow], chain_ok: bool, events: int) -> None:
    out = sys.stdout.write
    out(
        "memwarden bench api — over HTTP (memwarden serve, loopback) vs in-process, same database, same run\n"
    )
    out(
        f"{'op':>5} {'clients':>7} | {'HTTP req/s':>10} {'p50 ms':>8} {'p95 ms':>8} | "
        f"{'in-proc op/s':>12} {'p50 ms':>8} {'p95 ms':>8} | {'+p50 ms':>8} {'target':>7}\n"
    )
    for r in rows:
        verdict = "ok" if r.overhead_p50_ms <= r.target_ms else "MISSED"
        out(
            f"{r.op:>5} {r.clients:>7} | {r.http.per_second:>10.1f} {r.http.p50_ms:>8.3f} {r.http.p95_ms:>8.3f} | "
            f"{r.in_process.per_second:>12.1f} {r.in_process.p50_ms:>8.3f} {r.in_process.p95_ms:>8.3f} | "
            f"{r.overhead_p50_ms:>8.3f} {'<=' + str(r.target_ms):>7} {verdict}\n"
        )
    out(f"ledger after the run: {events} events, chain {'verifies' if chain_ok else 'BROKEN'}\n")
