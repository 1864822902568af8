"""The ci hypothesis profile reports a failing example within a bounded time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SLOW_FAILURE = """
import time

from hypothesis import given, strategies as st

import tests.conftest  # noqa: F401 -- registers and loads the suite's profiles


@given(st.lists(st.integers(0, 1000), min_size=40, max_size=80))
def test_fails_and_shrinks_slowly(xs):
    time.sleep(0.05)  # every shrink step re-runs the example, as a simulated run would
    assert sum(xs) < 100
"""


def test_ci_profile_cuts_shrinking_short_and_reports_the_example(tmp_path: Path) -> None:
    """With a 2 s shrink budget a slow-to-shrink failure is reported, partly shrunk,
    well before the shrinker's own five minutes (or pytest's 600 s timeout)."""
    (tmp_path / "test_slow_failure.py").write_text(SLOW_FAILURE)
    env = {**os.environ, "CI": "1", "HYPOTHESIS_SHRINK_BUDGET_S": "2", "PYTHONPATH": str(ROOT)}
    env.pop("HYPOTHESIS_PROFILE", None)
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
         str(tmp_path / "test_slow_failure.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert out.returncode == 1, out.stdout[-2000:]
    # The example is printed (hypothesis 6.1xx says "Failing test case", older ones
    # "Falsifying example"), partly shrunk, with the shrinker's note that it stopped.
    assert "Failing test case" in out.stdout or "Falsifying example" in out.stdout
    assert "stopped because it is making very slow" in out.stdout, out.stdout[-2000:]
    assert took < 60, took
