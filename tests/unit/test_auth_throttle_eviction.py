"""The failed-authentication throttle must not be resettable by the attacker it throttles:
a flood of distinct source addresses (cheap with IPv6) may not wipe a key id's bucket, and
addresses in one IPv6 /64 (one host's allocation) share one source bucket."""

from __future__ import annotations

from memwarden.api.http.auth_throttle import MAX_REMEMBERED, AuthThrottle


def test_a_flood_of_sources_does_not_reset_a_throttled_key() -> None:
    throttle = AuthThrottle(per_source=10**9, per_key=5)
    for _ in range(5):
        throttle.failed("192.0.2.1", "kid_target", now=0.0)
    assert throttle.retry_after("192.0.2.1", "kid_target", now=0.0) > 0
    for n in range(MAX_REMEMBERED + 2):
        throttle.failed(f"2001:db8:{n >> 16:x}:{n & 0xFFFF:x}::1", None, now=0.0)
    assert throttle.retry_after("198.51.100.7", "kid_target", now=0.0) > 0


def test_addresses_in_one_ipv6_64_share_a_source_bucket() -> None:
    throttle = AuthThrottle(per_source=3, per_key=10**9)
    for host in range(3):
        throttle.failed(f"2001:db8:1:2::{host + 1:x}", None, now=0.0)
    assert throttle.retry_after("2001:db8:1:2:ffff::9", None, now=0.0) > 0
    assert throttle.retry_after("2001:db8:1:3::1", None, now=0.0) == 0
