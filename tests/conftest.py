"""Suite-wide settings: hypothesis profiles and the docker marker gate."""

import os

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
