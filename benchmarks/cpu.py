"""CPU time by process role, read from ``/proc`` (Linux): where a benchmark's operations
spend the machine's cores. On two cores a saturated run's latency follows its CPU per
operation (Little's law), so this is what explains a gap, not just what shows it."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import psycopg

PROC = Path("/proc")
ROLES = ("api", "projector", "postgres", "bench")


class CpuPerOperation(msgspec.Struct, frozen=True):
    """Microseconds of CPU per operation, by role: ``api`` the served API process(es),
    ``projector`` its projector process, ``postgres`` the PostgreSQL processes of the bench's
    server (every local one where the bench does not say which: see ``postmaster_of``),
    ``bench`` this process (the HTTP clients, or the in-process callers)."""

    api: float
    projector: float
    postgres: float
    bench: float

    @property
    def total(self) -> float:
        return self.api + self.projector + self.postgres + self.bench


def _stat(pid: str) -> tuple[int, str, int] | None:
    """(parent pid, command name, CPU ticks) of a process, or None if it is gone."""
    try:
        raw = (PROC / pid / "stat").read_text()
    except OSError:
        return None
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), name, int(fields[11]) + int(fields[12])


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


Snapshot = dict[int, tuple[str, int]]
"""CPU ticks so far of each process that has a role, by pid: (role, ticks)."""


def postmaster_of(conninfo: str) -> int | None:
    """The postmaster of the server at ``conninfo`` (the parent of a backend of it), or None
    where that is not a local process: on a machine shared with other servers, only its
    processes are the bench's ``postgres``."""
    with psycopg.connect(conninfo) as conn:  # the backend is read while it lives
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        backend = _stat(str(row[0])) if row else None
    if backend is None or backend[1] != "postgres":
        return None  # a remote server: its backend's pid names no process here
    parent = _stat(str(backend[0]))
    return backend[0] if parent is not None and parent[1] == "postgres" else None


def cpu_ticks(server_pid: int, postmaster: int | None = None) -> Snapshot | None:
    """CPU ticks so far of each process by role (None where ``/proc`` is not there); with a
    ``postmaster``, only its own processes count as ``postgres``."""
    if not (PROC / "self" / "stat").exists():
        return None
    stats = {int(p.name): s for p in PROC.iterdir() if p.name.isdigit() and (s := _stat(p.name)) is not None}
    served = {server_pid}
    grew = True
    while grew:  # the served process and everything it started
        children = {pid for pid, (ppid, _, _) in stats.items() if ppid in served} - served
        served |= children
        grew = bool(children)
    ticks: Snapshot = {}
    for pid, (ppid, name, used) in stats.items():
        if pid in served:
            ticks[pid] = ("projector" if " project" in _cmdline(pid) else "api", used)
        elif name == "postgres" and (postmaster is None or postmaster in (pid, ppid)):
            ticks[pid] = ("postgres", used)
        elif pid == os.getpid():
            ticks[pid] = ("bench", used)
    return ticks


def ticks_used(before: Snapshot | None, after: Snapshot | None) -> dict[str, int]:
    """CPU ticks by role between two snapshots, process by process: a process that started
    meanwhile counts whole, one that ended meanwhile drops out (never its whole life taken
    off the others: backends of other servers on the machine come and go). Empty without
    ``/proc``."""
    if before is None or after is None:
        return {}
    used = dict.fromkeys(ROLES, 0)
    for pid, (role, ticks) in after.items():
        earlier = before.get(pid)
        used[role] += ticks - (earlier[1] if earlier is not None and earlier[0] == role else 0)
    return used


def per_operation(used: dict[str, int], operations: int) -> CpuPerOperation | None:
    """Ticks used (by role) over ``operations`` operations, as microseconds per operation."""
    if not used or operations == 0:
        return None
    per_tick_us = 1_000_000 / os.sysconf("SC_CLK_TCK") / operations
    return CpuPerOperation(**{role: round(used.get(role, 0) * per_tick_us, 1) for role in ROLES})
