"""Where the shared test data lives: `shared/` beside the repository.

CI clones the repository with `shared/` next to it; a developer's checkout
sits the same way. FAULTLINE_SHARED overrides the location.
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """The shared/ directory: $FAULTLINE_SHARED, else ../shared beside the repo."""
    override = os.environ.get("FAULTLINE_SHARED")
    return Path(override) if override else REPO_ROOT.parent / "shared"


PORCUPINE_FIXTURES = shared_dir() / "fixtures" / "porcupine"
