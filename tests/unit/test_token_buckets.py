"""The one token bucket behind rate limits and the authentication throttle."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memwarden.api.http.limits import TokenBuckets


@given(st.lists(st.floats(min_value=0, max_value=300), max_size=200), st.integers(min_value=1, max_value=120))
def test_takes_never_exceed_the_burst_plus_the_refill(times: list[float], per_minute: int) -> None:
    buckets = TokenBuckets()
    taken = sum(buckets.take("k", per_minute, now=at) == 0.0 for at in sorted(times))
    span = max(times, default=0.0) - min(times, default=0.0)
    assert taken <= per_minute + span * per_minute / 60.0 + 1e-9


@given(st.integers(min_value=1, max_value=120), st.integers(min_value=0, max_value=50))
def test_the_wait_given_is_the_wait_needed(per_minute: int, debt: int) -> None:
    buckets = TokenBuckets()
    for _ in range(per_minute + debt):
        buckets.spend("k", per_minute, now=0.0)
    wait = buckets.wait("k", per_minute, now=0.0)
    assert abs(wait - (debt + 1) * 60.0 / per_minute) < 1e-9  # each failure past empty is one more token owed
    assert buckets.take("k", per_minute, now=wait * 0.999) > 0.0
    assert buckets.take("k", per_minute, now=wait + 1e-9) == 0.0  # (float rounding)


def test_take_spends_nothing_when_empty_and_spend_goes_into_debt() -> None:
    buckets = TokenBuckets()
    assert [buckets.take("k", 2, now=0.0) for _ in range(3)] == [0.0, 0.0, 30.0]
    assert buckets.wait("k", 2, now=0.0) == 30.0  # the refused take owed nothing
    buckets.spend("k", 2, now=0.0)
    assert buckets.wait("k", 2, now=0.0) == 60.0
    assert buckets.wait("other", 2, now=0.0) == 0.0
