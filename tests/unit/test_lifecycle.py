"""Properties of the one open -> closed evolution that disputes, findings and automatic
settlements share (domain/model/lifecycle.py), checked with hypothesis on each of them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memwarden.domain.model.autopilot import evolve_decision, evolve_finding
from memwarden.domain.model.events import (
    ConflictSettled,
    DisputeOpened,
    DisputeResolved,
    Event,
    FindingOpened,
    FindingResolved,
    SettlementOverturned,
)
from memwarden.domain.model.memory import evolve_dispute

times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))
words = st.text(min_size=1, max_size=12)
reasons = st.none() | words


def stream(
    field: str, opening: type[Event], opened: dict[str, Any], closing: type[Event], closed: dict[str, Any]
) -> st.SearchStrategy[tuple[Event, Event]]:
    """An opening and a closing event of one stream (``field`` names it), with the given
    strategies for their other fields."""
    return st.uuids().flatmap(
        lambda stream_id: st.tuples(
            st.builds(opening, at=times, **{field: st.just(stream_id)}, **opened),
            st.builds(closing, at=times, **{field: st.just(stream_id)}, **closed),
        )
    )


disputes = stream(
    "dispute_id",
    DisputeOpened,
    {"namespace": words, "memory_id": st.uuids(), "incumbent_id": st.uuids(), "reason": words},
    DisputeResolved,
    {
        "decision": st.sampled_from(["uphold_new", "keep_old", "edit", "both_valid"]),
        "reviewer": words,
        "reason": reasons,
        "replacement_id": st.none() | st.uuids(),
    },
)
judged = {"judge": words, "rule": words, "explanation": words}
findings = stream(
    "finding_id",
    FindingOpened,
    {
        "namespace": words,
        "memory_a": st.uuids(),
        "memory_b": st.uuids(),
        "cosine": st.floats(-1, 1),
        **judged,
    },
    FindingResolved,
    {
        "decision": st.sampled_from(["keep_a", "keep_b", "both_valid", "dismiss"]),
        "reviewer": words,
        "reason": reasons,
    },
)
settlements = stream(
    "decision_id",
    ConflictSettled,
    {
        "namespace": words,
        "winner": st.uuids(),
        "loser": st.uuids(),
        "dial": st.sampled_from(["auto", "lower_trust", "all"]),
        **judged,
    },
    SettlementOverturned,
    {"reviewer": words, "restored": st.uuids(), "reason": reasons},
)

Evolve = Callable[[Any, Event], Any]
LIFECYCLES: dict[str, tuple[Evolve, st.SearchStrategy[tuple[Event, Event]], tuple[str, str], set[str]]] = {
    # evolver, (opening, closing) events, the statuses (opened, closed), the fields the closing sets
    "dispute": (
        evolve_dispute,
        disputes,
        ("open", "resolved"),
        {"decision", "reviewer", "resolved_at", "replacement_id"},
    ),
    "finding": (evolve_finding, findings, ("open", "resolved"), {"decision", "reviewer", "resolved_at"}),
    "settlement": (
        evolve_decision,
        settlements,
        ("settled", "overturned"),
        {"reviewer", "restored", "overturned_at"},
    ),
}
PROPERTY_SETTINGS = settings(max_examples=100, deadline=None)


def _fields(state: Any) -> dict[str, Any]:
    return msgspec.structs.asdict(state)


@pytest.mark.parametrize("name", sorted(LIFECYCLES))
def test_open_then_close_counts_two_versions_and_keeps_what_was_opened(name: str) -> None:
    evolve, events, (open_status, closed_status), closing_sets = LIFECYCLES[name]

    @PROPERTY_SETTINGS
    @given(pair=events)
    def check(pair: tuple[Event, Event]) -> None:
        opening, closing = pair
        opened = evolve(None, opening)
        assert opened.version == 1
        assert opened.status == open_status
        assert opened.id == opening.stream_id
        assert all(_fields(opened)[f] is None for f in closing_sets)
        closed = evolve(opened, closing)
        assert closed.version == 2
        assert closed.status == closed_status
        changed = {f for f, v in _fields(closed).items() if v != _fields(opened)[f]}
        assert changed <= {*closing_sets, "status", "version"}
        assert closed.reviewer == _fields(closing)["reviewer"]
        (closed_at,) = [f for f in closing_sets if f.endswith("_at")]
        assert _fields(closed)[closed_at] == closing.at

    check()


@pytest.mark.parametrize("name", sorted(LIFECYCLES))
def test_a_closing_event_needs_an_opened_stream(name: str) -> None:
    evolve, events, _, _ = LIFECYCLES[name]

    @PROPERTY_SETTINGS
    @given(pair=events)
    def check(pair: tuple[Event, Event]) -> None:
        with pytest.raises(TypeError):
            evolve(None, pair[1])

    check()


@pytest.mark.parametrize("name", sorted(LIFECYCLES))
def test_another_streams_event_is_refused(name: str) -> None:
    """Each evolver refuses the other two's events, before and after it opened."""
    evolve, events, _, _ = LIFECYCLES[name]
    others = st.one_of(*(strategy for other, (_, strategy, _, _) in LIFECYCLES.items() if other != name))

    @PROPERTY_SETTINGS
    @given(pair=events, foreign=others)
    def check(pair: tuple[Event, Event], foreign: tuple[Event, Event]) -> None:
        opened = evolve(None, pair[0])
        for event in foreign:
            for state in (None, opened):
                with pytest.raises(TypeError, match=f"not a {name} event"):
                    evolve(state, event)

    check()
