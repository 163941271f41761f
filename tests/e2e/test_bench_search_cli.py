"""`memwarden bench search`, `bench locomo` and `bench api`, run as the CLI, on small inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memwarden.domain.ledger.database import ConnectionParams
from tests.conftest import url_of
from tests.processes import TIMED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), TIMED]  # each runs the bench CLI (up to 600 s)

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench_env(pg_server: ConnectionParams, tmp_path: Path, redis_url: str) -> dict[str, str]:
    """The bench CLI's environment: the session's PostgreSQL server and Redis (the workers
    and load benches run `memwarden worker` processes)."""
    env = {k: v for k, v in os.environ.items() if k != "MEMWARDEN_EMBEDDER"}
    env["DATABASE_URL"] = url_of(pg_server)
    env["REDIS_URL"] = redis_url
    env["MEMWARDEN_DATA_DIR"] = str(tmp_path / "home")
    return env


def run_cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "memwarden.api.cli.main", "bench", *args, "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_bench_search_reports_plausible_figures(bench_env: dict[str, str]) -> None:
    report = run_cli(bench_env, "search", "--mode", "in-process", "--sizes", "300", "--queries", "20")
    (row,) = report["rows"]
    assert row["size"] == 300
    assert row["outcomes"] == {"stored": 300}
    assert row["embedder_fallbacks"] == 0
    assert row["queries"] == 20
    assert row["search_p50_ms"] > 0
    assert row["search_p95_ms"] >= row["search_p50_ms"]
    assert row["raw_p50_ms"] > 0
    assert row["search_results_mean"] > 0
    assert row["raw_results_mean"] == 10
    assert row["ratio_p50"] > 0
    assert row["embed_query_p50_ms"] > 0
    assert row["search_no_embed_p50_ms"] > 0
    assert row["vector_lane_p50_ms"] > 0
    assert row["lexical_lane_p50_ms"] > 0
    assert row["hnsw_index_mb"] > 0
    assert row["search_tables_mb"] >= row["search_docs_mb"] >= row["hnsw_index_mb"]
    assert row["peak_rss_mb"] > 0
    assert row["p95_target_ms"] is None  # the p95 target is for 100k memories
    assert report["wall_seconds"] > 0


def test_bench_search_over_http_reports_latency_and_the_embeddings_share(bench_env: dict[str, str]) -> None:
    # No Redis: the served process runs the passes itself, as on the embedded default.
    in_process = {k: v for k, v in bench_env.items() if k != "REDIS_URL"}
    report = run_cli(in_process, "search", "--sizes", "120", "--queries", "10")
    (row,) = report["rows"]
    assert row["size"] == 120
    assert sum(row["outcomes"].values()) == 120
    assert row["embedder_fallbacks"] == 0
    assert row["queries"] == 10
    assert row["results_mean"] == 10  # k = 10 out of 120 memories in the caller's namespace
    assert 0 < row["search_p50_ms"] <= row["search_p95_ms"]
    assert 0 < row["embed_p50_ms"] <= row["embed_p95_ms"]
    assert row["embed_share_p50"] == pytest.approx(row["embed_p50_ms"] / row["search_p50_ms"], abs=0.002)
    assert (row["p50_target_ms"], row["p95_target_ms"]) == (20, 40)
    cpu = row["cpu_us"]
    assert cpu["api"] > 0  # the served process did the searching
    assert cpu["postgres"] > 0
    assert report["targets_met"] == (row["search_p50_ms"] <= 20 and row["search_p95_ms"] <= 40)
    assert row["profile"] is None
    assert row["load"]
    # The served dispatchers had handed on the seeded memories before the timing (without
    # settle they start about 360 events behind; a busy machine may leave the last few
    # events, the key's, unread for a while).
    assert row["passes_behind"] < 50
    assert row["settle_seconds"] >= 0


def test_bench_search_profiles_configurations_side_by_side_over_http(bench_env: dict[str, str]) -> None:
    configs = (
        "reranking: MEMWARDEN_RERANK=ms-marco MEMWARDEN_RERANK_WHEN=always; plain: MEMWARDEN_RERANK=none"
    )
    report = run_cli(
        bench_env, "search", "--sizes", "120", "--queries", "8", "--profile", "--configs", configs
    )
    reranking, plain = report["rows"]
    assert (reranking["config"], plain["config"]) == ("reranking", "plain")
    assert plain["config_env"] == {"MEMWARDEN_RERANK": "none"}
    for row in (reranking, plain):
        assert row["queries"] == 8
        stages = row["profile"]
        for stage in ("lexical lane", "hydrate", "audit append", "HTTP (client wall less handler)"):
            assert stages[stage][2] == 1.0, stage  # every search ran it
        p50, p95, _share = stages["total (client wall)"]
        assert (p50, p95) == (row["search_p50_ms"], row["search_p95_ms"])
    assert reranking["profile"]["rerank"][2] == 1.0
    assert "rerank" not in plain["profile"]


def _turns(session: int, lines: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"speaker": s, "dia_id": f"D{session}:{n}", "text": t} for n, (s, t) in enumerate(lines, start=1)]


TINY_LOCOMO = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "2:00 pm on 3 March, 2024",
            "session_1": _turns(
                1,
                [
                    ("Ada", "Good morning Bo, how was your weekend?"),
                    ("Bo", "I went kayaking on the fjord near Bergen with my cousin."),
                    ("Ada", "That sounds lovely. I finally adopted a greyhound named Pickles."),
                    ("Bo", "Congratulations! Greyhounds are such gentle dogs."),
                    ("Ada", "I am also learning to play the cello at a community music school."),
                ],
            ),
            "session_2_date_time": "10:15 am on 12 April, 2024",
            "session_2": _turns(
                2,
                [
                    ("Bo", "I started a new job as a lighthouse keeper in Cornwall."),
                    ("Ada", "Wow, a lighthouse! Do you live there too?"),
                    ("Bo", "Yes, in the cottage next to it, and the storms are loud at night."),
                    ("Ada", "Pickles would love the beach there, she runs so fast."),
                    ("Bo", "Bring her over in summer, we can bake saffron buns together."),
                    ("Bo", "Bring her over in summer, we can bake saffron buns together."),  # a duplicate
                ],
            ),
        },
        "qa": [
            {
                "question": "What is the name of Ada's greyhound?",
                "answer": "Pickles",
                "evidence": ["D1:3"],
                "category": 4,
            },
            {
                "question": "When did Bo start working as a lighthouse keeper?",
                "answer": "April 2024",
                "evidence": ["D2:1", "D9:99"],  # D9:99 matches no turn
                "category": 2,
            },
            {
                "question": "Where did Bo go kayaking, and which instrument is Ada learning?",
                "answer": "near Bergen; the cello",
                "evidence": ["D1:2", "D1:5"],
                "category": 1,
            },
            {
                "question": "What will they bake with saffron in summer?",
                "answer": "saffron buns",
                "evidence": ["D2:6"],  # the deduplicated turn: it maps to D2:5's memory
                "category": 3,
            },
            {"question": "What does Bo think of cats?", "answer": "unknown", "evidence": [], "category": 4},
            {
                "question": "Did Ada adopt a cat?",
                "adversarial_answer": "yes",
                "evidence": ["D1:3"],
                "category": 5,
            },
        ],
    }
]


def test_bench_locomo_scores_evidence_recall(bench_env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps(TINY_LOCOMO))
    report = run_cli(bench_env, "locomo", "--data", str(data))
    assert report["conversations"] == 1
    assert report["turns"] == 11
    assert report["deduplicated"] == 1
    assert report["rejected"] == 0
    assert report["questions_scored"] == 4  # category 5 and the question without evidence are not
    assert report["questions_without_evidence"] == 1
    assert report["evidence_ids"] == 6
    assert report["unanswerable_evidence_ids"] == 1
    assert report["unanswerable"] == ["tiny-1:'D9:99'"]
    assert report["fallbacks"] == 0
    assert all(v > 0 for v in report["p50_ms"].values())
    rows = {r["category"].split()[0]: r for r in report["rows"]}
    assert {k: r["questions"] for k, r in rows.items()} == {"1": 1, "2": 1, "3": 1, "4": 1, "overall": 4}
    # distinctive words: found at k=5 by the lexical lane and by hybrid
    assert rows["4"]["lexical_at5"] == rows["4"]["hybrid_at5"] == 1.0
    # the deduplicated turn counts as retrieved when the memory it matched is
    assert rows["3"]["lexical_at5"] == rows["3"]["hybrid_at5"] == 1.0
    # the unanswerable id stays in the denominator: at most half can be found
    assert rows["2"]["lexical_at5"] == rows["2"]["hybrid_at5"] == 0.5
    # ten memories in the namespace: k=10 by cosine returns every one of them
    assert rows["1"]["vector_at10"] == 1.0
    assert rows["2"]["vector_at10"] == 0.5
    overall = rows["overall"]
    assert overall["lexical_at10"] == pytest.approx(
        sum(rows[c]["lexical_at10"] for c in "1234") / 4, abs=1e-3
    )


def test_bench_api_measures_both_sides_and_where_the_cpu_went(bench_env: dict[str, str]) -> None:
    bench_env["MEMWARDEN_EMBEDDER"] = "none"  # the HTTP side is what is measured, not the model
    report = run_cli(bench_env, "api", "--seconds", "0.8", "--clients", "1,2")
    assert report["chain_ok"] is True
    assert [(r["op"], r["clients"]) for r in report["rows"]] == [
        ("write", 1),
        ("read", 1),
        ("write", 2),
        ("read", 2),
    ]
    for row in report["rows"]:
        assert row["http"]["operations"] > 0
        assert row["in_process"]["operations"] > 0
        assert row["overhead_p50_ms"] == pytest.approx(
            row["http"]["p50_ms"] - row["in_process"]["p50_ms"], abs=0.002
        )
        # the served API does the HTTP side's work; the bench process does the in-process side's
        # while the served API idles (not "more than its HTTP client": httpx's share of a cheap
        # write is about as large as the write, and that comparison failed under load)
        assert row["http_cpu_us"]["api"] > row["in_process_cpu_us"]["api"]
        assert row["in_process_cpu_us"]["bench"] > row["in_process_cpu_us"]["api"]
    # the MCP row: a read tool call over /mcp against POST /v1/mem/read, same server, same run
    assert [(r["op"], r["clients"]) for r in report["mcp_rows"]] == [("read", 1), ("read", 2)]
    for row in report["mcp_rows"]:
        assert row["mcp"]["operations"] > 0
        assert row["http"]["operations"] > 0
        assert row["overhead_p50_ms"] == pytest.approx(
            row["mcp"]["p50_ms"] - row["http"]["p50_ms"], abs=0.002
        )
    assert report["http_floor"]["operations"] > 0
