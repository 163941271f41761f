"""Headless Chromium (Debian's chromium and chromium-driver) driven by Selenium, for the
tests of pages the app serves."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402

NO_CHROMIUM = pytest.mark.skipif(shutil.which("chromedriver") is None, reason="chromium-driver not installed")


@contextmanager
def chromium(wait_seconds: float = 0) -> Iterator[WebDriver]:
    """A headless browser; ``wait_seconds``: how long ``find_element`` waits for a page."""
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.implicitly_wait(wait_seconds)
    try:
        yield driver
    finally:
        driver.quit()
