"""Suite-wide settings: hypothesis profiles and the docker marker gate."""

import os

from hypothesis import HealthCheck, settings

# CI runs a fixed, derandomized profile so a green run is reproducible;
# developers get a faster random one by default.
settings.register_profile(
    "ci",
    max_examples=200,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
