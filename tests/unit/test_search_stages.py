"""Stage timing is off unless asked for, and adds up what it is asked to time."""

from __future__ import annotations

import time

import pytest

from memwarden.projections.search.stages import (
    add,
    parse_server_timing,
    recording,
    server_timing,
    stage,
    timed_stages,
)


def test_a_stage_outside_a_recording_keeps_nothing() -> None:
    with stage("lexical lane"):
        pass
    with recording() as stages:
        pass
    assert stages == {}


def test_stages_add_up_and_the_recording_closes() -> None:
    with recording() as stages:
        for _ in range(2):
            with stage("rerank"):
                time.sleep(0.01)
        with stage("hydrate"):
            pass
    assert set(stages) == {"rerank", "hydrate"}
    assert stages["rerank"] >= 0.02
    before = dict(stages)
    with stage("rerank"):
        pass
    assert stages == before


def _failing_lane() -> None:
    with stage("vector lane"):
        raise ValueError("lane failed")


def test_a_stage_that_raises_is_still_timed() -> None:
    with recording() as stages, pytest.raises(ValueError, match="lane failed"):
        _failing_lane()
    assert "vector lane" in stages


def test_server_timing_reads_back_what_it_wrote() -> None:
    stages = {"finish (budget, visibility)": 0.0015, 'a "quoted" stage': 0.25, "handler": 0.3}
    back = parse_server_timing(server_timing(stages))
    assert list(back) == ["finish (budget, visibility)", "a 'quoted' stage", "handler"]
    assert back["handler"] == pytest.approx(0.3)
    assert back["finish (budget, visibility)"] == pytest.approx(0.0015)


def test_timed_stages_adds_a_header_only_when_enabled() -> None:
    with timed_stages(enabled=False) as headers, stage("rerank"):
        pass
    assert headers == {}
    with timed_stages(enabled=True) as headers:
        with stage("rerank"):
            time.sleep(0.005)
        add("embedding (its own thread)", 0.002)
    back = parse_server_timing(headers["Server-Timing"])
    assert set(back) == {"rerank", "embedding (its own thread)", "handler"}
    assert back["handler"] >= back["rerank"] >= 0.005
