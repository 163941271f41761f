"""Stage timing is off unless asked for, and adds up what it is asked to time."""

from __future__ import annotations

import time

import pytest

from memwarden.projections.search.stages import recording, stage


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
