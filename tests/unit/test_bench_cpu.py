"""The benches' CPU by role: on a machine shared with other PostgreSQL servers, only the
bench's own server counts as ``postgres`` once its postmaster is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import cpu


def proc(root: Path, pid: int, ppid: int, name: str, ticks: int) -> None:
    (root / str(pid)).mkdir()
    # pid (comm) state ppid, then fields up to utime (14th) and stime (15th)
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 5
    (root / str(pid) / "stat").write_text(f"{pid} ({name}) " + " ".join(fields))
    (root / str(pid) / "cmdline").write_bytes(name.encode())


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text("")
    proc(tmp_path, 100, 1, "postgres", 5)  # the bench's postmaster
    proc(tmp_path, 101, 100, "postgres", 7)  # one of its backends
    proc(tmp_path, 200, 1, "postgres", 50)  # another server on the machine
    proc(tmp_path, 201, 200, "postgres", 70)
    proc(tmp_path, 300, 1, "python", 3)  # the served API
    monkeypatch.setattr(cpu, "PROC", tmp_path)
    return tmp_path


def test_only_the_bench_servers_processes_are_its_postgres(machine: Path) -> None:
    ticks = cpu.cpu_ticks(300, postmaster=100)
    assert ticks is not None
    assert {pid for pid, (role, _) in ticks.items() if role == "postgres"} == {100, 101}
    assert ticks[300] == ("api", 3)


def test_without_a_postmaster_every_local_postgres_counts(machine: Path) -> None:
    ticks = cpu.cpu_ticks(300)
    assert ticks is not None
    assert {pid for pid, (role, _) in ticks.items() if role == "postgres"} == {100, 101, 200, 201}
