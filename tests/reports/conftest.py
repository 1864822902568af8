"""Fixtures for the report tests: a headless chromium driven by selenium.

The browser is Debian's chromium with its chromedriver, both given by path
so selenium-manager never downloads anything. .ci/run installs them
(apt-get); a developer without them gets the browser tests skipped with
the reason, but under CI (CI set) a missing browser fails the tests.

Screenshots go to pytest's tmp dir, and also to $FAULTLINE_ARTIFACTS when
set (.ci/run sets it and prints where), so a CI run keeps them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _missing() -> str | None:
    """None when chromium, chromedriver and selenium are usable, else why not."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        return f"{' and '.join(absent)} missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError as exc:
        return f"selenium is not installed: {exc}"
    return None


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless chromium that records console messages (goog:loggingPrefs)."""
    reason = _missing()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

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


def keep_artifact(path: Path) -> None:
    """Copies a screenshot to $FAULTLINE_ARTIFACTS (when set) and prints where it is."""
    where = os.environ.get("FAULTLINE_ARTIFACTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        path = Path(shutil.copy(path, Path(where) / path.name))
    print(f"screenshot: {path}")
