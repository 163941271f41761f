"""The console in headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium) against a real ``memwarden serve`` process; a screenshot of each page goes to
``.ci/artifacts/console/``."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from memwarden.bootstrap.runtime import Runtime
from memwarden.domain.ledger.database import ConnectionParams
from memwarden.domain.settings import Settings
from tests.conftest import url_of
from tests.e2e.review_seed import TEAM_CONTRADICTION, seed_review_queues
from tests.processes import TIMED, cli_key, cli_last_line, serving

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
SHOTS = REPO_ROOT / ".ci" / "artifacts" / "console"
pytestmark = [
    pytest.mark.skipif(shutil.which("chromedriver") is None, reason="chromium-driver not installed"),
    TIMED,
]


class Served(NamedTuple):
    base: str
    keys: dict[str, str]
    """By role: owner (acme), member and agent (acme/eng)."""
    env: dict[str, str]


@pytest.fixture
def served(database: ConnectionParams, tmp_path: Path) -> Iterator[Served]:
    env = {
        **os.environ,
        "DATABASE_URL": url_of(database),
        "MEMWARDEN_DATA_DIR": str(tmp_path / "home"),
        "MEMWARDEN_EMBEDDER": "hash",
    }
    keys = {
        role: cli_key(env, ns, actor, role)
        for ns, actor, role in (
            ("acme", "olga", "owner"),
            ("acme/eng", "mia", "member"),
            ("acme/eng", "bot", "agent"),
        )
    }
    with serving(env, host="localhost") as (_server, base):  # a Secure cookie is kept on localhost
        yield Served(base, keys, env)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.implicitly_wait(20)  # find_element waits for the page a click led to
    try:
        yield driver
    finally:
        driver.quit()


def _shot(driver: WebDriver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _wait_for(driver: WebDriver, text: str) -> None:
    WebDriverWait(driver, 30).until(lambda d: text in d.page_source)


def _sign_in(driver: WebDriver, key: str) -> None:
    driver.find_element(By.NAME, "key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def _seed(base: str, keys: dict[str, str]) -> str:
    """A memory, a dispute and a request with markup in it; returns the dispute's id."""

    def mem(key: str, name: str, body: dict[str, object]) -> dict[str, object]:
        answer = httpx.post(
            f"{base}/v1/mem/{name}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        result: dict[str, object] = answer.json()
        return result

    mem(
        keys["member"],
        "write",
        {
            "content": "Dana lives in Oslo <b>bold?</b>",
            "subject": "dana",
            "attribute": "city",
            "value": "Oslo",
            "provenance": {"source": "manual"},
        },
    )
    contra = mem(
        keys["agent"],
        "write",
        {"content": "Dana lives in Bergen", "subject": "dana", "attribute": "city", "value": "Bergen"},
    )
    assert contra["outcome"] == "disputed"
    return str(contra["dispute_id"])


@pytest.mark.slow
def test_console_pages_in_headless_chromium(served: Served, browser: WebDriver) -> None:
    base, keys, _env = served
    dispute = _seed(base, keys)
    browser.get(f"{base}/console/login")
    _shot(browser, "login")
    _sign_in(browser, keys["agent"])
    _wait_for(browser, "may not use the console")
    _sign_in(browser, keys["owner"])
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/console/audit"))
    cookie = browser.get_cookie("memwarden_console")
    assert cookie is not None
    assert not cookie["value"].startswith("mw_")  # a server-side session id, never the key
    assert cookie["value"] not in keys.values()
    assert cookie["httpOnly"]
    assert cookie["secure"]
    assert cookie["sameSite"] == "Strict"
    assert browser.execute_script("return document.cookie") == ""  # invisible to scripts
    assert "<b>bold?</b>" not in browser.page_source or "&lt;b&gt;" in browser.page_source
    _shot(browser, "audit")

    browser.get(f"{base}/console/asof?as_of=2999-01-01&compare_as_of=2000-01-01")
    assert (
        "Dana lives in Oslo <b>bold?</b>" in browser.find_element(By.TAG_NAME, "main").text
    )  # shown as text
    _shot(browser, "asof")
    browser.find_element(By.CSS_SELECTOR, "a[href^='/console/memory/']").click()
    assert "History of" in browser.page_source
    _shot(browser, "history")

    browser.get(f"{base}/console/review/disputes")
    assert dispute in browser.page_source
    _shot(browser, "review")
    browser.find_element(By.XPATH, "//table[@id='queue']//button[text()='keep_old']").click()
    _wait_for(browser, "Nothing to review")

    browser.get(f"{base}/console/keys")
    browser.find_element(By.NAME, "target").send_keys("acme/eng")
    browser.find_element(By.NAME, "actor").send_keys("helper")
    browser.find_element(By.XPATH, "//button[text()='Issue']").click()
    assert browser.find_element(By.ID, "new-key").text.startswith("mw_")
    _shot(browser, "keys")

    browser.get(f"{base}/console/policies?namespace=acme/eng")
    _shot(browser, "policies")
    browser.get(f"{base}/console/projections")
    _shot(browser, "projections")
    browser.get(f"{base}/console/ledger")
    browser.find_element(By.XPATH, "//button[text()='Verify']").click()
    assert "The chain holds" in browser.find_element(By.ID, "verdict").text
    _shot(browser, "ledger")
    browser.get(f"{base}/console/certificates")
    browser.find_element(By.NAME, "certificate").send_keys('{"id": "x"}')
    browser.find_element(By.XPATH, "//button[text()='Verify']").click()
    _wait_for(browser, "Refused")
    _shot(browser, "certificates")

    browser.get(f"{base}/console/audit?since=not-a-date")
    assert "Refused" in browser.page_source
    _shot(browser, "error")
    browser.find_element(By.XPATH, "//button[text()='Log out']").click()
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/console/login"))
    assert browser.get_cookie("memwarden_console") is None


def _click(driver: WebDriver, item: object, button: str) -> None:
    """Press the named button of the queue row of ``item``."""
    row = driver.find_element(By.XPATH, f"//tr[td[normalize-space()='{item}']]")
    row.find_element(By.XPATH, f".//button[text()='{button}']").click()


def test_review_queues_and_checkpoints_in_headless_chromium(served: Served, browser: WebDriver) -> None:
    base, keys, env = served
    with Runtime(Settings.from_env(env), follow=False) as runtime:  # the served database's services
        seeded = seed_review_queues(runtime)
    cli_last_line(env, "ledger", "checkpoint")  # the existing checkpoint command
    browser.get(f"{base}/console/login")
    _sign_in(browser, keys["owner"])
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/console/audit"))

    browser.get(f"{base}/console/review/findings")
    queue = browser.find_element(By.ID, "queue").text
    assert str(seeded.finding) in queue
    for said in (*TEAM_CONTRADICTION, "by bot"):  # both statements side by side, with their writer
        assert said in queue, said
    assert "1 in all" in browser.find_element(By.ID, "count").text
    _shot(browser, "review-findings")
    tick = browser.find_element(By.CSS_SELECTOR, f"input[name='ids'][value='{seeded.finding}']")
    tick.send_keys(Keys.SPACE)  # keyboard: the row is ticked without a mouse
    assert tick.is_selected()
    browser.find_element(By.CSS_SELECTOR, "#bulk input[name='reason']").send_keys("noon is the new rule")
    browser.find_element(By.CSS_SELECTOR, "#bulk button[value='keep_b']").click()
    _wait_for(browser, "Nothing to review")
    browser.get(f"{base}/console/review/findings?status=resolved")
    assert "keep_b" in browser.find_element(By.ID, "queue").text
    browser.get(f"{base}/console/review/findings?status=all&writer=nobody")
    assert "0 in all" in browser.find_element(By.ID, "count").text

    browser.get(f"{base}/console/review/proposals")
    row = browser.find_element(By.XPATH, f"//tr[td[normalize-space()='{seeded.proposal}']]")
    row.find_element(By.NAME, "content").send_keys("Staging is rebuilt every Sunday night")
    _shot(browser, "review-proposals")
    _click(browser, seeded.proposal, "edit")
    _wait_for(browser, "True")  # the edited column; the proposal waits for approval
    _click(browser, seeded.proposal, "approve")
    WebDriverWait(browser, 30).until(lambda d: str(seeded.proposal) not in d.page_source)
    browser.get(f"{base}/console/review/proposals?status=approved")
    assert str(seeded.proposal) in browser.find_element(By.ID, "queue").text

    browser.get(f"{base}/console/review/decisions")
    row = browser.find_element(By.XPATH, f"//tr[td[normalize-space()='{seeded.decision}']]")
    row.find_element(By.NAME, "reason").send_keys("the backup moved to Monday")
    _shot(browser, "review-decisions")
    _click(browser, seeded.decision, "overturn")
    _wait_for(browser, "Nothing to review")
    browser.get(f"{base}/console/review/decisions?status=overturned")
    assert str(seeded.decision) in browser.find_element(By.ID, "queue").text
    browser.find_element(By.CSS_SELECTOR, f"a[href='/console/memory/{seeded.memories[2]}']").click()
    assert "History of" in browser.page_source

    browser.get(f"{base}/console/ledger")
    browser.find_element(By.XPATH, "//button[text()='Make a checkpoint']").click()
    assert browser.find_element(By.ID, "checkpoint").text
    browser.get(f"{base}/console/checkpoints")
    rows = browser.find_elements(By.CSS_SELECTOR, "#checkpoints tr")
    assert len(rows) >= 3  # the header, the console's checkpoint, the CLI's (and the periodic pass's)
    _shot(browser, "checkpoints")
    browser.find_elements(By.XPATH, "//button[text()='Verify against it']")[-1].click()
    assert "The chain holds" in browser.find_element(By.ID, "verdict").text


def _nav_links(driver: WebDriver) -> set[str]:
    return {link.text for link in driver.find_elements(By.CSS_SELECTOR, "header nav a")}


@pytest.mark.slow
def test_navigation_offers_each_role_only_what_it_may_use(served: Served, browser: WebDriver) -> None:
    """An admin is not offered the owner-only Projections page; an auditor is offered
    neither the review queues nor keys and policies (the API would answer "forbidden")."""
    base, keys, env = served
    expected = {
        "owner": keys["owner"],
        "admin": cli_key(env, "acme", "ada", "admin"),
        "auditor": cli_key(env, "acme", "aude", "auditor"),
    }
    compliance = {"Audit", "As of", "Ledger", "Checkpoints", "Prove", "Certificates"}
    review = {"Keys", "Policies"}
    for role, key in expected.items():
        browser.delete_all_cookies()
        browser.get(f"{base}/console/login")
        _sign_in(browser, key)
        WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/console/audit"))
        shown = _nav_links(browser)
        _shot(browser, f"nav-{role}")
        assert compliance <= shown
        assert ("Projections" in shown) is (role == "owner")
        assert (review <= shown) is (role in {"owner", "admin"})
        assert any(text.startswith("Review:") for text in shown) is (role in {"owner", "admin"})
        assert ("Erase" in shown) is (role in {"owner", "admin"})


@pytest.mark.slow
def test_erasure_page_erases_by_id_and_shows_a_verified_certificate(
    served: Served, browser: WebDriver
) -> None:
    base, keys, _env = served
    written = httpx.post(
        f"{base}/v1/mem/write",
        json={"content": "Quinn's home address is 12 Elm Street"},
        headers={"Authorization": f"Bearer {keys['member']}"},
        timeout=30,
    )
    assert written.status_code == 200, written.text
    memory_id = written.json()["id"]
    browser.get(f"{base}/console/login")
    _sign_in(browser, keys["owner"])
    WebDriverWait(browser, 30).until(lambda d: d.current_url.endswith("/console/audit"))
    browser.find_element(By.LINK_TEXT, "Erase").click()
    form = browser.find_element(By.ID, "erase")
    form.find_element(By.CSS_SELECTOR, "input[value='ids']").click()
    form.find_element(By.NAME, "what").send_keys(memory_id)
    form.find_element(By.NAME, "reason").send_keys("the subject asked to be forgotten")
    form.find_element(By.XPATH, ".//button[text()='Erase']").click()
    _wait_for(browser, "1 erased")
    assert "verifies against this ledger" in browser.find_element(By.ID, "verdict").text
    certificate = browser.find_element(By.ID, "certificate").text
    assert memory_id in certificate
    assert "12 Elm Street" not in browser.page_source
    _shot(browser, "erase")
    prove = browser.find_element(By.ID, "prove-link").get_attribute("href")
    browser.get(f"{base}/console/ledger")  # a checkpoint that covers the erasure's record
    browser.find_element(By.XPATH, "//button[text()='Make a checkpoint']").click()
    assert browser.find_element(By.ID, "checkpoint").text
    browser.get(str(prove))
    assert browser.find_element(By.ID, "verdict").text == "Verified"
    reread = httpx.post(
        f"{base}/v1/mem/read",
        json={"id": memory_id},
        headers={"Authorization": f"Bearer {keys['member']}"},
        timeout=30,
    )
    assert reread.status_code in {200, 404}, reread.text
    assert "Elm Street" not in reread.text
    if reread.status_code == 200:
        assert reread.json()["status"] == "erased"
