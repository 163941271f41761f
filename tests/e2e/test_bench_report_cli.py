"""`memwarden bench report --quick` as the CLI runs it, on a tiny LoCoMo-shaped file made
here: it runs the search and ingest benches, draws every PNG and rewrites only its own
section of the Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.report import BEGIN, END, RERANK_DEPTHS
from tests.e2e.test_bench_search_cli import bench_env, run_cli
from tests.processes import TIMED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), TIMED]  # the bench CLI (up to 600 s)

__all__ = ["bench_env"]  # the fixture, shared with the other bench tests

PNG = b"\x89PNG\r\n\x1a\n"


def tiny_locomo(path: Path) -> None:
    """One conversation of 24 turns and a question of each category, its evidence among them."""
    turns = [
        {
            "speaker": "Ann" if n % 2 else "Bo",
            "dia_id": f"D1:{n}",
            "text": f"We talked about the {topic} on day {n}.",
        }
        for n, topic in enumerate(["garden", "boat", "concert", "dog", "recipe", "trip"] * 4, start=1)
    ]
    questions = [
        {"question": "What did they say about the boat?", "category": 1, "evidence": ["D1:2", "D1:8"]},
        {"question": "When was the concert?", "category": 2, "evidence": ["D1:3"]},
        {"question": "Is there a dog?", "category": 3, "evidence": ["D1:4"]},
        {"question": "What recipe came up?", "category": 4, "evidence": ["D1:5"]},
    ]
    conversation = {"session_1": turns, "session_1_date_time": "1:56 pm on 8 May, 2023"}
    path.write_text(json.dumps([{"sample_id": "tiny", "conversation": conversation, "qa": questions}]))


def test_the_quick_report_writes_its_figures_and_only_its_section(
    bench_env: dict[str, str], tmp_path: Path
) -> None:
    data, out, images = tmp_path / "tiny.json", tmp_path / "docs" / "benchmarks.md", tmp_path / "docs" / "img"
    tiny_locomo(data)
    out.parent.mkdir()
    out.write_text(f"# Benchmarks\n\nkept above\n\n{BEGIN}\nan old report\n{END}\n\nkept below\n")
    env = {**bench_env, "MEMWARDEN_EMBEDDER": "hash", "MEMWARDEN_RERANK": "ms-marco"}

    run = run_cli(env, "report", "--quick", "--data", str(data), "--out", str(out), "--images", str(images))

    names = [c["name"] for c in run["search"]["configurations"]]
    assert names == ["lexical", "vector", "hybrid", *(f"reranked@{d}" for d in RERANK_DEPTHS)]
    assert run["search"]["questions"] == 4
    assert all(len(run["search"]["latencies_ms"][name]) == 4 for name in names)
    assert run["ingest"]["turns"] == 24
    assert run["footprint"] is None  # not with --quick
    assert run["quick"] is True
    assert json.loads((images / "report.json").read_text())["search"]["questions"] == 4
    pngs = sorted(p.name for p in images.glob("*.png"))
    assert pngs == ["ingest.png", "recall-by-category.png", "recall-vs-p50.png", "search-latency.png"]
    for png in images.glob("*.png"):
        assert png.read_bytes()[:8] == PNG
        assert png.stat().st_size > 10_000  # drawn, not an empty canvas
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nkept above\n\n")
    assert text.rstrip().endswith("kept below")
    assert text.count(BEGIN) == 1
    assert "an old report" not in text
    for name in pngs:
        assert f"](img/{name})" in text
    assert "Command: `memwarden bench report --quick" in text
    assert "Machine: " in text
    assert "the reference is `hybrid`" in text
    assert "| reranked@30 |" in text
