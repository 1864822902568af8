"""Suite-wide settings: hypothesis profiles, and the guard on make test's parallel half."""

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.internal.conjecture import engine

# CI's per-test limit is pytest-timeout's 600 s (pyproject.toml). Hypothesis
# shrinks a failure for up to 300 s by default, each step re-running the
# example (a whole simulated run in tests/sim), so a property that failed
# late could die on the timeout with nothing reported. In the ci profile the
# shrinker stops after this budget and hypothesis prints the smallest
# example found so far, with a note that shrinking was cut short.
SHRINK_BUDGET_S = float(os.environ.get("HYPOTHESIS_SHRINK_BUDGET_S", "60"))


def bound_shrinking(seconds: float) -> list[Phase]:
    """Caps the shrink phase at `seconds`; returns the phases the profile runs.

    The cap is hypothesis's own shrink deadline, documented as monkeypatchable
    (hypothesis.internal.conjecture.engine.MAX_SHRINKING_SECONDS); a version
    without it gets no shrinking at all, which reports the first failure
    found, unshrunk, rather than none.
    """
    if hasattr(engine, "MAX_SHRINKING_SECONDS"):
        engine.MAX_SHRINKING_SECONDS = seconds
        return list(Phase)
    return [p for p in Phase if p is not Phase.shrink]


# CI runs a fixed, derandomized profile so a green run is reproducible;
# developers get a faster random one by default.
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
settings.register_profile(
    "ci",
    max_examples=200,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
    phases=bound_shrinking(SHRINK_BUDGET_S) if PROFILE == "ci" else list(Phase),
)
settings.register_profile("dev", max_examples=50, deadline=None, print_blob=True)
settings.load_profile(PROFILE)


# `make test` runs some directories two tests at a time (the Makefile's
# PARALLEL_TESTS): only tests on simulated time or none may be there, since a
# test timed by the wall clock would share the two cores with another and
# could fail on a loaded machine only. These mark such a test.
WALL_CLOCK_MARKERS = ("docker", "spark_cluster", "browser")
WALL_CLOCK_MODULES = ("tests.node.cluster",)  # real ember processes, real time


def wall_clock_reason(item: Any) -> str | None:
    """Why `item` is timed by the wall clock, or None as far as can be told:
    a marker above, or its module holding something of a module above."""
    for marker in WALL_CLOCK_MARKERS:
        if item.get_closest_marker(marker) is not None:
            return f"it is marked {marker}"
    module = getattr(item, "module", None)
    for name, value in vars(module).items() if module is not None else ():
        if getattr(value, "__module__", None) in WALL_CLOCK_MODULES:
            return f"its module uses {value.__module__}.{name}"
    return None


@pytest.hookimpl(tryfirst=True)  # before its fixtures start anything
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under pytest-xdist, a wall-clock test fails at once, naming why."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    reason = wall_clock_reason(item)
    if reason is not None:
        pytest.fail(
            f"{item.nodeid} runs in parallel with another test, but {reason}, so the "
            "wall clock times it: move it out of the Makefile's PARALLEL_TESTS "
            "directories, or run it without -n",
            pytrace=False,
        )
