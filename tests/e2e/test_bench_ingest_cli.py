"""`memwarden bench ingest` as the CLI runs it, on a tiny LoCoMo-shaped file made here and
the hash embedder: every turn goes in over HTTP twice (default embedder, then none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.ingest import BATCH_SIZES
from tests.e2e.test_bench_search_cli import bench_env, run_cli
from tests.processes import TIMED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), TIMED]  # the bench CLI (up to 600 s)

__all__ = ["bench_env"]  # the fixture, shared with the other bench tests


def tiny_locomo(path: Path) -> None:
    turns = [
        {"speaker": "A", "dia_id": f"D1:{n}", "text": f"Turn {n} talks about topic {n * 7 % 11}."}
        for n in range(30)
    ]
    later = [{"speaker": "B", "dia_id": "D2:1", "text": "A later session says something else."}]
    conversation = {
        "speaker_a": "A",
        "speaker_b": "B",
        "session_2": later,
        "session_2_date_time": "2:00 pm on 9 May, 2023",
        "session_1": [*turns, {"speaker": "B", "dia_id": "D1:99", "text": "  "}],
        "session_1_date_time": "1:56 pm on 8 May, 2023",
    }
    path.write_text(json.dumps([{"sample_id": "tiny", "conversation": conversation, "qa": []}]))


def test_bench_ingest_reports_three_rates(bench_env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "tiny.json"
    tiny_locomo(data)
    env = {**bench_env, "MEMWARDEN_EMBEDDER": "hash"}
    report = run_cli(env, "ingest", "--data", str(data), "--batch", "8", "--clients", "2")
    assert report["turns"] == 31  # the blank turn is left out
    alone = report["embedder_alone"]
    assert alone["texts"] == 31
    assert alone["batch"] in BATCH_SIZES  # for 31 texts every size is one batch: the fastest by noise
    assert alone["per_second"] > 0
    assert alone["cpu_us"] > 0
    for run in (report["ingest"], report["plain_ledger"]):
        assert run["memories"] == 31
        assert run["outcomes"] == {"stored": 31}
        assert run["per_second"] > 0
        assert 0 < run["accepted_seconds"] <= run["seconds"]  # searchable comes after accepted
        assert run["cpu"]["api"] > 0
        assert run["cpu"]["projector"] > 0  # the projector's catch-up is inside the run
    assert report["ingest"]["embedder"] == "hash"
    assert report["plain_ledger"]["embedder"] == "none"
    assert report["ratio"] == round(report["ingest"]["per_second"] / alone["per_second"], 3)
