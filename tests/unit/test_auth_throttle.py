"""The failed-authentication throttle: a leaky bucket of failures per source and per key id."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memwarden.api.http.auth_throttle import AuthThrottle
from memwarden.domain.model.keys import format_key


def test_a_source_may_fail_up_to_its_limit_then_waits_until_the_bucket_drains() -> None:
    throttle = AuthThrottle(per_source=6, per_key=100)
    for _ in range(6):
        assert throttle.retry_after("10.0.0.1", None, now=0.0) == 0
        throttle.failed("10.0.0.1", None, now=0.0)
    assert throttle.retry_after("10.0.0.1", None, now=0.0) == 10  # one failure drains in 60/6 s
    assert throttle.retry_after("10.0.0.2", None, now=0.0) == 0  # another source is not affected
    assert throttle.retry_after("10.0.0.1", None, now=10.0) == 0


def test_a_key_id_is_throttled_whatever_the_source() -> None:
    throttle = AuthThrottle(per_source=100, per_key=3)
    for n in range(3):
        throttle.failed(f"10.0.0.{n}", "k1", now=0.0)
    assert throttle.retry_after("10.9.9.9", "k1", now=0.0) > 0
    assert throttle.retry_after("10.9.9.9", "k2", now=0.0) == 0


@given(st.lists(st.floats(min_value=0, max_value=600), max_size=50), st.integers(min_value=1, max_value=60))
def test_after_a_quiet_minute_every_source_may_try_again(times: list[float], limit: int) -> None:
    throttle = AuthThrottle(per_source=limit, per_key=limit)
    for at in sorted(times):
        throttle.failed("s", "k", now=at)
    last = max(times, default=0.0)
    assert throttle.retry_after("s", "k", now=last + 60.0 * (len(times) + 1) / limit) == 0


def test_an_attempt_spends_its_source_and_the_key_id_it_names() -> None:
    throttle = AuthThrottle(per_source=100, per_key=2)
    key = format_key("a" * 32, "b" * 40)
    guess = throttle.attempt("10.0.0.1", key)
    other_source = throttle.attempt("10.0.0.2", key)
    garbage = throttle.attempt(None, "not a key")
    assert guess.source == "10.0.0.1"
    assert garbage.source == "unknown"
    assert guess.key_id == "a" * 32
    assert garbage.key_id is None
    for _ in range(2):
        guess.failed()
    assert other_source.retry_after() > 0  # the key id is throttled from every source
    assert throttle.attempt("10.0.0.3", "").retry_after() == 0
