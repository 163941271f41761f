"""The machine a figure was measured on, printed beside it: processor, cores, memory, and
the load averages at the start of the run (other work on a shared machine moves every
absolute figure; a figure's same-run reference is what survives it)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import msgspec

CHECKOUT = Path(__file__).resolve().parents[1]


class Machine(msgspec.Struct, frozen=True, kw_only=True):
    processor: str
    cores: int
    memory_gb: float
    load_average: tuple[float, float, float]
    python: str
    commit: str
    """The checkout's commit (``+`` when its work tree has changes), or ``?``."""
    at: str
    """UTC, to the second."""

    def describe(self) -> str:
        one, five, fifteen = self.load_average
        return (
            f"{self.processor}, {self.cores} cores, {self.memory_gb:.0f} GB, load {one:.2f} {five:.2f} {fifteen:.2f},"
            f" Python {self.python}, commit {self.commit}, {self.at}"
        )


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


def _git(*argv: str) -> str:
    command = ["git", "-C", str(CHECKOUT), *argv]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=10).stdout.strip()  # noqa: S603


def _commit() -> str:
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "?"
    return head + ("+" if dirty else "")


def machine_now() -> Machine:
    one, five, fifteen = os.getloadavg()
    return Machine(
        processor=_processor(),
        cores=os.cpu_count() or 1,
        memory_gb=round(_memory_gb(), 1),
        load_average=(round(one, 2), round(five, 2), round(fifteen, 2)),
        python=platform.python_version(),
        commit=_commit(),
        at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
    )


def invocation(bench: str) -> str:
    """The command line that ran this bench, as a reader would type it."""
    argv = sys.argv[1:]
    if argv[:2] == ["bench", bench]:
        return " ".join(["memwarden", *argv])
    return f"memwarden bench {bench}"
