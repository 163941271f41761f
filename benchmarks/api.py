"""`memwarden bench api`: write and read over HTTP (a real `memwarden serve` process on
loopback, on a scratch database) next to the same operations in-process without HTTP,
measured in the same run. Target: HTTP adds at most 1 ms to p50.

The two sides alternate in short rounds, so a machine that speeds up or slows down during
the run (a shared VM does) moves both alike; each side's latencies are pooled over its
rounds. Where ``/proc`` is there, each row also says where the CPU went per operation."""

from __future__ import annotations

import argparse
import itertools
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from uuid import UUID

import httpx
import msgspec

from benchmarks.common import (
    RunStats,
    deployment_env,
    run_threads,
    scratch_database,
    summarize,
    timed_threads,
)
from benchmarks.cpu import CpuPerOperation, cpu_ticks, per_operation, ticks_used
from benchmarks.write import sentence
from memwarden.bootstrap.runtime import Runtime, api_runtime
from memwarden.domain.model.identity import Identity
from memwarden.domain.model.keys import IssueKey
from memwarden.domain.model.policies import PolicyBody

TARGET_OVERHEAD_MS = 1.0
TENANT = "benchapi"
ROUNDS = 4
Worker = Callable[[int], Callable[[int], None]]


class ApiBenchRow(msgspec.Struct, frozen=True):
    op: str
    clients: int
    http: RunStats
    in_process: RunStats
    overhead_p50_ms: float
    target_ms: float
    http_cpu_us: CpuPerOperation | None = None
    in_process_cpu_us: CpuPerOperation | None = None


class McpBenchRow(msgspec.Struct, frozen=True):
    """A tool call over ``/mcp`` against the same syscall over plain HTTP, same server."""

    op: str
    clients: int
    mcp: RunStats
    http: RunStats
    overhead_p50_ms: float
    target_ms: float
    mcp_cpu_us: CpuPerOperation | None = None
    http_cpu_us: CpuPerOperation | None = None


MCP_VERSION = "2026-07-28"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Mcp-Protocol-Version": MCP_VERSION,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "read",
}
"""What the official ``mcp`` client sends with a ``read`` tool call: one POST, no session."""
MCP_META = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "memwarden-bench", "version": "0.1.0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(env: dict[str, str], port: int, workers: int) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "memwarden.api.cli.main",
        "serve",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
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
    mcp_rows: list[McpBenchRow] = []
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
            env = deployment_env(settings, MEMWARDEN_POOL_SIZE=str(max(counts) + 4))
            port = _free_port()
            server = _serve(env, port, args.server_workers)
            try:
                floor, httpx_floor = _http_floor(f"http://127.0.0.1:{port}", port, args.seconds)
                bench = _Bench(runtime, port, server.pid, keys, identities)
                for clients in counts:
                    rows.extend(bench.measure(clients, args.seconds))
                    mcp_rows.append(bench.measure_mcp(clients, args.seconds))
            finally:
                server.terminate()
                server.wait(timeout=30)
            report = runtime.ledger.verify()
    if args.json:
        sys.stdout.write(
            msgspec.json.encode(
                {
                    "rows": rows,
                    "mcp_rows": mcp_rows,
                    "http_floor": floor,
                    "httpx_floor": httpx_floor,
                    "chain_ok": report.ok,
                }
            ).decode()
            + "\n"
        )
    else:
        _print(rows, report.ok, report.checked)
        _print_mcp(mcp_rows)
        sys.stdout.write(
            f"HTTP floor (GET /healthz, no auth, no database; 1 client): p50 {floor.p50_ms:.3f} ms, "
            f"p95 {floor.p95_ms:.3f} ms, {floor.per_second:.0f} req/s; with httpx as the client: "
            f"p50 {httpx_floor.p50_ms:.3f} ms\n"
        )
    return 0 if report.ok else 1


class HttpClient:
    """One persistent HTTP/1.1 connection on a plain socket: the request's bytes out, the
    status line, headers and a ``Content-Length`` body back.

    The client runs on the same two cores as the server, so its own cost is kept small, as a
    load generator's is: ``http.client`` costs about 0.13 ms of CPU a request more, httpx
    more again (its floor is reported beside).
    """

    def __init__(self, port: int, key: str | None = None, headers: dict[str, str] | None = None) -> None:
        self._port = port
        self._socket: socket.socket | None = None
        self._buffer = b""
        self.last_headers: dict[str, str] = {}
        """The last answer's headers, names in lower case."""
        self._headers = (
            "Host: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (f"Authorization: Bearer {key}\r\n" if key is not None else "")
            + "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        )

    def call(self, method: str, path: str, body: object = None) -> tuple[int, bytes]:
        payload = msgspec.json.encode(body) if body is not None else b""
        request = (
            f"{method} {path} HTTP/1.1\r\n{self._headers}Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        try:
            return self._exchange(request)
        except ConnectionError:
            # The server closes a connection left idle past its keep-alive time: reconnect once.
            self.close()
            return self._exchange(request)

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self._socket is None:
            self._socket = socket.create_connection(("127.0.0.1", self._port), timeout=30)
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._buffer = b""
        self._socket.sendall(request)
        while b"\r\n\r\n" not in self._buffer:
            self._receive()
        head, _, rest = self._buffer.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {
            name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in header_lines)
        }
        if "chunked" in headers.get("transfer-encoding", ""):
            raise RuntimeError("the bench client reads Content-Length bodies only")
        length = int(headers.get("content-length", "0"))
        self._buffer = rest
        while len(self._buffer) < length:
            self._receive()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        self.last_headers = headers
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(status_line.split(" ", 2)[1]), body

    def _receive(self) -> None:
        assert self._socket is not None
        chunk = self._socket.recv(65536)
        if not chunk:
            raise ConnectionResetError("the server closed the connection")
        self._buffer += chunk

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _http_floor(base: str, port: int, seconds: float) -> tuple[RunStats, RunStats]:
    """``GET /healthz`` (no key, no database) with the bench's client and with httpx."""
    light, heavy = HttpClient(port), httpx.Client(base_url=base, timeout=30)
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


class _Bench:
    """The two sides of one row: HTTP clients use keys ``[0, clients)``, in-process callers
    the identities ``[clients, 2*clients)`` (separate namespaces, the same work)."""

    def __init__(
        self,
        runtime: Runtime,
        port: int,
        server_pid: int,
        keys: dict[int, str],
        identities: dict[int, Identity],
    ) -> None:
        self.runtime = runtime
        self.port = port
        self.server_pid = server_pid
        self.keys = keys
        self.identities = identities

    def measure(self, clients: int, seconds: float) -> list[ApiBenchRow]:
        http_clients = {i: HttpClient(self.port, self.keys[i]) for i in range(clients)}
        written: dict[int, list[UUID]] = {i: [] for i in range(clients * 2)}
        tag = f"{clients}-{time.monotonic_ns()}"
        counters = {i: itertools.count() for i in range(clients * 2)}  # no sentence written twice

        def http_write(index: int) -> Callable[[int], None]:
            client, counter = http_clients[index], counters[index]

            def work(_n: int) -> None:
                cmd = sentence(index, next(counter))
                status, data = client.call("POST", "/v1/mem/write", {"content": f"{cmd.content} [{tag}]"})
                if status != 200:
                    raise RuntimeError(f"HTTP write failed: {status} {data[:300]!r}")
                written[index].append(UUID(msgspec.json.decode(data)["id"]))

            return work

        def local_write(index: int) -> Callable[[int], None]:
            identity, counter = self.identities[clients + index], counters[clients + index]

            def work(_n: int) -> None:
                cmd = sentence(index, next(counter))
                result = self.runtime.memory.write(
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
            identity, ids = self.identities[clients + index], written[clients + index]

            def work(n: int) -> None:  # the same work as the route: scoped read, then its audit record
                memory_id = ids[n % len(ids)]
                if self.runtime.reads.read(identity, memory_id) is None:
                    raise RuntimeError("in-process read missed")
                self.runtime.core.governance.record_audit(identity, "read", "ok", "", memory_id)

            return work

        try:
            run_threads("warm-up", clients, min(1.0, seconds), http_write)
            run_threads("warm-up", clients, min(1.0, seconds), local_write)
            self.runtime.reads.wait_for(self.runtime.ledger.head_position())
            return [
                self._row("write", clients, seconds, http_write, local_write),
                self._row("read", clients, seconds, http_read, local_read),
            ]
        finally:
            for client in http_clients.values():
                client.close()

    def measure_mcp(self, clients: int, seconds: float) -> McpBenchRow:
        """``read`` as a ``tools/call`` over ``/mcp`` and as ``POST /v1/mem/read``, by the same
        keys on the same memories (written first over HTTP)."""
        plain = {i: HttpClient(self.port, self.keys[i]) for i in range(clients)}
        tools = {i: HttpClient(self.port, self.keys[i], MCP_HEADERS) for i in range(clients)}
        ids: dict[int, list[str]] = {i: [] for i in range(clients)}
        try:
            for i in range(clients):
                for n in range(8):
                    status, data = plain[i].call(
                        "POST",
                        "/v1/mem/write",
                        {"content": f"{sentence(i, n).content} [mcp {time.monotonic_ns()}]"},
                    )
                    if status != 200:
                        raise RuntimeError(f"HTTP write failed: {status} {data[:300]!r}")
                    ids[i].append(msgspec.json.decode(data)["id"])

            def http_read(index: int) -> Callable[[int], None]:
                client, mine = plain[index], ids[index]

                def work(n: int) -> None:
                    status, data = client.call("POST", "/v1/mem/read", {"id": mine[n % len(mine)]})
                    if status != 200:
                        raise RuntimeError(f"HTTP read failed: {status} {data[:300]!r}")

                return work

            def mcp_read(index: int) -> Callable[[int], None]:
                client, mine = tools[index], ids[index]

                def work(n: int) -> None:
                    call = {
                        "jsonrpc": "2.0",
                        "id": n,
                        "method": "tools/call",
                        "params": {
                            "name": "read",
                            "arguments": {"id": mine[n % len(mine)]},
                            "_meta": MCP_META,
                        },
                    }
                    status, data = client.call("POST", "/mcp", call)
                    if (
                        status != 200
                        or msgspec.json.decode(data).get("result", {}).get("isError") is not False
                    ):
                        raise RuntimeError(f"MCP read failed: {status} {data[:300]!r}")

                return work

            run_threads("warm-up", clients, min(1.0, seconds), mcp_read)
            (mcp, mcp_cpu), (http, http_cpu) = self._alternate(
                clients, seconds, "read", (mcp_read, http_read)
            )
        finally:
            for client in (*plain.values(), *tools.values()):
                client.close()
        return McpBenchRow(
            "read",
            clients,
            mcp,
            http,
            round(mcp.p50_ms - http.p50_ms, 3),
            TARGET_OVERHEAD_MS,
            mcp_cpu,
            http_cpu,
        )

    def _row(self, op: str, clients: int, seconds: float, over_http: Worker, local: Worker) -> ApiBenchRow:
        (http_stats, http_cpu), (local_stats, local_cpu) = self._alternate(
            clients, seconds, op, (over_http, local), ("HTTP", "in-process")
        )
        return ApiBenchRow(
            op,
            clients,
            http_stats,
            local_stats,
            round(http_stats.p50_ms - local_stats.p50_ms, 3),
            TARGET_OVERHEAD_MS,
            http_cpu,
            local_cpu,
        )

    def _alternate(
        self,
        clients: int,
        seconds: float,
        op: str,
        sides: tuple[Worker, Worker],
        labels: tuple[str, str] = ("MCP", "HTTP"),
    ) -> list[tuple[RunStats, CpuPerOperation | None]]:
        """Alternate the two sides in ``ROUNDS`` rounds; pool each side's latencies and CPU."""
        pooled: list[tuple[list[float], list[float], dict[str, int]]] = [([], [], {}), ([], [], {})]
        for _ in range(ROUNDS):
            for make, (latencies, elapsed, used) in zip(sides, pooled, strict=True):
                before = cpu_ticks(self.server_pid)
                took, spent = timed_threads(clients, seconds / ROUNDS, make)
                after = cpu_ticks(self.server_pid)
                latencies.extend(took)
                elapsed.append(spent)
                for role, ticks in ticks_used(before, after).items():
                    used[role] = used.get(role, 0) + ticks
        results = []
        for label, (latencies, elapsed, used) in zip(labels, pooled, strict=True):
            stats = summarize(f"{label} {op}", clients, latencies, sum(elapsed))
            results.append((stats, per_operation(used, stats.operations)))
        return results


def _print(rows: list[ApiBenchRow], chain_ok: bool, events: int) -> None:
    out = sys.stdout.write
    out(
        "memwarden bench api — over HTTP (memwarden serve, loopback) vs in-process, same database,"
        f" same run ({ROUNDS} alternating rounds a side)\n"
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
    out(
        "CPU per operation, microseconds: api / projector / postgres / this process"
        " (the HTTP clients, or the in-process callers) = total\n"
    )
    for r in rows:
        if r.http_cpu_us is not None and r.in_process_cpu_us is not None:
            out(
                f"{r.op:>5} {r.clients:>7} | HTTP {_cpu_line(r.http_cpu_us)}"
                f" | in-process {_cpu_line(r.in_process_cpu_us)}\n"
            )
    out(f"ledger after the run: {events} events, chain {'verifies' if chain_ok else 'BROKEN'}\n")


def _print_mcp(rows: list[McpBenchRow]) -> None:
    out = sys.stdout.write
    out(
        "MCP — a tool call over /mcp (JSON-RPC, stateless) vs the same syscall over plain HTTP, same server\n"
    )
    out(
        f"{'op':>5} {'clients':>7} | {'MCP call/s':>10} {'p50 ms':>8} {'p95 ms':>8} | "
        f"{'HTTP req/s':>10} {'p50 ms':>8} {'p95 ms':>8} | {'+p50 ms':>8} {'target':>7}\n"
    )
    for r in rows:
        verdict = "ok" if r.overhead_p50_ms <= r.target_ms else "MISSED"
        out(
            f"{r.op:>5} {r.clients:>7} | {r.mcp.per_second:>10.1f} {r.mcp.p50_ms:>8.3f} {r.mcp.p95_ms:>8.3f} | "
            f"{r.http.per_second:>10.1f} {r.http.p50_ms:>8.3f} {r.http.p95_ms:>8.3f} | "
            f"{r.overhead_p50_ms:>8.3f} {'<=' + str(r.target_ms):>7} {verdict}\n"
        )
        if r.mcp_cpu_us is not None and r.http_cpu_us is not None:
            out(f"{'':>15}CPU us/op: MCP {_cpu_line(r.mcp_cpu_us)} | HTTP {_cpu_line(r.http_cpu_us)}\n")


def _cpu_line(cpu: CpuPerOperation) -> str:
    return f"{cpu.api:.0f} / {cpu.projector:.0f} / {cpu.postgres:.0f} / {cpu.bench:.0f} = {cpu.total:.0f}"
