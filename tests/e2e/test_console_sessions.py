"""Console sessions and failed authentication: the cookie holds a server-side session id,
never the API key; logging out revokes the session at once; sessions expire; guessing keys
(over the API or at the console's login) is throttled with 429 and Retry-After."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from litestar.testing import TestClient

from memwarden.api.console.session import COOKIE, ProcessSessions
from memwarden.api.http.app import create_app
from memwarden.api.http.auth_throttle import FAILURES_PER_MINUTE_PER_KEY, FAILURES_PER_MINUTE_PER_SOURCE
from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.settings import Settings
from tests.e2e.api_helpers import Api, issue_key

BASE = "https://console.test"


@pytest.fixture
def console(settings: Settings) -> Iterator[tuple[Runtime, TestClient]]:  # type: ignore[type-arg]
    with Runtime(settings) as runtime, TestClient(app=create_app(runtime=runtime), base_url=BASE) as client:
        yield runtime, client


def _login(client: TestClient, key: str) -> int:  # type: ignore[type-arg]
    answer = client.post(
        "/console/login", data={"key": key}, headers={"Origin": BASE}, follow_redirects=False
    )
    return answer.status_code


def test_the_cookie_holds_a_session_id_never_the_key_and_logout_revokes_it(
    console: tuple[Runtime, TestClient],  # type: ignore[type-arg]
) -> None:
    runtime, client = console
    key = issue_key(runtime, "acme", "olga", "owner")
    assert _login(client, key) == 303
    session = client.cookies.get(COOKIE)
    assert session
    assert key not in session
    assert not session.startswith("mw_")
    page = client.get("/console/audit")
    assert page.status_code == 200
    assert key not in page.text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None

    stolen = session
    out = client.post(
        "/console/logout", data={"csrf": csrf.group(1)}, headers={"Origin": BASE}, follow_redirects=False
    )
    assert out.status_code == 303
    client.cookies.set(COOKIE, stolen, domain="console.test", path="/console")  # a copy kept elsewhere
    replayed = client.get("/console/audit", follow_redirects=False)
    assert replayed.status_code == 303
    assert replayed.headers["location"].endswith("/console/login")


def test_sessions_expire() -> None:
    sessions = ProcessSessions(seconds=0.0)
    opened = sessions.open("mw_" + "a" * 32 + "_" + "b" * 24)
    assert sessions.key_of(opened) is None
    assert sessions.key_of("not-a-session") is None


def test_guessed_keys_are_throttled_per_key_id_with_retry_after(api: Api) -> None:
    real = api.key("acme/eng", "bot", "agent")
    key_id = real.split("_")[1]
    guess = f"mw_{key_id}_{'x' * 24}"
    answers = [api.mem(guess, "stats").status_code for _ in range(FAILURES_PER_MINUTE_PER_KEY + 2)]
    assert answers[:FAILURES_PER_MINUTE_PER_KEY] == [401] * FAILURES_PER_MINUTE_PER_KEY
    throttled = api.mem(guess, "stats")
    assert throttled.status_code == 429
    assert throttled.json()["error"] == "rate_limited"
    assert int(throttled.headers["Retry-After"]) >= 1


def test_a_source_that_keeps_guessing_is_throttled_and_missing_keys_spend_nothing(api: Api) -> None:
    for _ in range(FAILURES_PER_MINUTE_PER_SOURCE * 2):
        assert api.client.post("/v1/mem/stats", json={}).status_code == 401  # no key: a mistake, not a guess
    answers = [
        api.mem(f"mw_{n:032x}_{'y' * 24}", "stats").status_code
        for n in range(FAILURES_PER_MINUTE_PER_SOURCE + 1)
    ]
    assert answers[:FAILURES_PER_MINUTE_PER_SOURCE] == [401] * FAILURES_PER_MINUTE_PER_SOURCE
    assert answers[-1] == 429


def test_console_logins_are_throttled(console: tuple[Runtime, TestClient]) -> None:  # type: ignore[type-arg]
    _runtime, client = console
    statuses = [_login(client, f"mw_{n:032x}_{'z' * 24}") for n in range(FAILURES_PER_MINUTE_PER_SOURCE + 1)]
    assert statuses[:FAILURES_PER_MINUTE_PER_SOURCE] == [401] * FAILURES_PER_MINUTE_PER_SOURCE
    assert statuses[-1] == 429
