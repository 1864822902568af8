"""Fixtures for the report tests: a headless chromium driven by selenium.

The browser is Debian's chromium with its chromedriver, both given by path
so selenium-manager never downloads anything. If they are missing the
session installs them with apt-get (CI runs as root); the browser tests skip,
with the reason, only when that install fails.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def pytest_configure(config: pytest.Config) -> None:
    """Registers the `browser` marker (tests that drive a real chromium)."""
    config.addinivalue_line("markers", "browser: drives a headless chromium through selenium")


def _ensure_chromium() -> str | None:
    """None when chromium and chromedriver are usable, else why not."""
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return None
    if shutil.which("apt-get") is None:
        return "chromium is missing and there is no apt-get to install it"
    install = ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"]
    try:
        if subprocess.run(install, capture_output=True, timeout=600).returncode != 0:
            # A fresh image may have no package lists yet.
            subprocess.run(["apt-get", "update"], check=True, capture_output=True, timeout=600)
            subprocess.run(install, check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"chromium is missing and apt-get install failed: {exc}"
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return None
    return "apt-get installed chromium but /usr/bin/chromium or chromedriver is still missing"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless chromium that records console messages (goog:loggingPrefs)."""
    reason = _ensure_chromium()
    if reason is not None:
        pytest.skip(reason)
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.skip(f"selenium is not installed: {exc}")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--allow-file-access-from-files"):  # fmt: skip
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()
