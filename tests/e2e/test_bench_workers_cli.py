"""`memwarden bench workers` as the CLI runs it, tiny: one worker process, a small backlog
and a short steady load; every memory judged exactly once, figures present."""

from __future__ import annotations

import pytest

from tests.e2e.test_bench_search_cli import bench_env, run_cli
from tests.processes import TIMED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), TIMED]  # the bench CLI (up to 600 s)

__all__ = ["bench_env"]


def test_bench_workers_judges_every_memory_once(bench_env: dict[str, str]) -> None:
    report = run_cli(
        bench_env, "workers", "--processes", "1", "--backlog", "12", "--seconds", "2", "--rate", "5"
    )
    (run,) = report["runs"]
    assert run["processes"] == 1
    assert run["backlog"] == 12
    assert run["steady_writes"] >= 5
    assert (run["judged_twice"], run["unjudged"]) == (0, 0)
    assert run["judged_per_second"] > 0
    assert 0 < run["lag_p50_s"] <= run["lag_p95_s"]
    assert report["neighbours_per_second"] > 0
    assert report["scaling"] is None  # one process count only
