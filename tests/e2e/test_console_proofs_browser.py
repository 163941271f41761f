"""The console's transparency pages in headless Chromium: the checkpoints page shows each
signed note with its witnesses, and any record is proven in one click (the proof checked with
the client alone, and given as a file for ``memwarden proof verify``)."""

from __future__ import annotations

import json

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from memwarden_client.proofs import VerifierKey, verify_proof_file
from tests.e2e.test_console_browser import Served, _shot, _sign_in, _wait_for, browser, served
from tests.processes import TIMED

pytestmark = TIMED
__all__ = ["browser", "served"]  # the fixtures this module uses


def test_a_record_is_proven_in_one_click_against_a_signed_checkpoint(
    served: Served, browser: WebDriver
) -> None:
    base, keys, _env = served
    owner = {"Authorization": f"Bearer {keys['owner']}"}
    for i in range(5):
        written = httpx.post(
            f"{base}/v1/mem/write",
            json={"content": f"Fact {i} about the on-call rota"},
            headers={"Authorization": f"Bearer {keys['agent']}"},
            timeout=30,
        )
        assert written.status_code == 200, written.text
    made = httpx.post(f"{base}/v1/compliance/ledger/checkpoint", headers=owner, timeout=30).json()

    browser.get(f"{base}/console/login")
    _sign_in(browser, keys["owner"])
    _wait_for(browser, "Audit")
    browser.get(f"{base}/console/checkpoints")
    _wait_for(browser, "tree root")
    assert made["root"] in browser.page_source
    assert "none yet" in browser.find_element(By.CSS_SELECTOR, "td.witnesses").text
    _shot(browser, "checkpoints-notes")

    browser.get(f"{base}/console/prove?position=3")
    _wait_for(browser, "Verified")
    assert browser.find_element(By.ID, "verdict").text == "Verified"
    document = json.loads(browser.find_element(By.ID, "proof-file").get_attribute("textContent") or "{}")
    assert "in the log's tree" in verify_proof_file(document, VerifierKey.parse(document["log_key"]))
    _shot(browser, "prove")

    browser.get(f"{base}/console/prove?position=999999")
    _wait_for(browser, "Refused")
    _shot(browser, "prove-refused")
