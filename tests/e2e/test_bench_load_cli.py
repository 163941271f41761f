"""`memwarden bench load` as CI runs it: 30 seconds of 16 agents with a worker running;
every syscall of the mix answered, no errors, and the end checks hold (audit records equal
requests sent, the chain verifies, the read models rebuild equal)."""

from __future__ import annotations

import pytest

from tests.e2e.test_bench_search_cli import bench_env, run_cli
from tests.processes import TIMED

pytestmark = TIMED

__all__ = ["bench_env"]


@pytest.mark.slow
def test_bench_load_for_thirty_seconds_holds_its_end_checks(bench_env: dict[str, str]) -> None:
    report = run_cli(bench_env, "load", "--seconds", "30", "--agents", "16", "--workers", "1")
    assert report["agents"] == 16
    assert report["workers"] == 1
    assert report["requests"] == sum(s["calls"] for s in report["syscalls"]) > 100
    assert report["audit_records"] == report["requests"]
    assert report["ledger_ok"] is True
    assert report["rebuild_differences"] == []
    assert report["errors"] == {}
    for syscall in report["syscalls"]:
        assert syscall["calls"] > 0, syscall
        assert 0 < syscall["p50_ms"] <= syscall["p95_ms"] <= syscall["p99_ms"], syscall
    assert len(report["rss"]) >= 2
    assert all(mb > 0 for mb in report["rss"][-1]["rss_mb"].values())
