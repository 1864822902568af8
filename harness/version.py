"""What was tested: the installed faultline/ember version and the git revision.

Recorded in every run's test.json (`options.ember_version`, `options.git_rev`;
not in `db_settings`, which the DB passes to the system under test) so reports
and the nightly pipeline can group and compare runs by version.
"""

from __future__ import annotations

import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent
# Keys older plans recorded in `db_settings`: labels of what was tested, never
# settings of the system under test, so no db passes them on (etcd would read
# ETCD_VERSION as its --version flag and refuse to start).
VERSION_LABELS = frozenset({"version", "ember_version", "git_rev", "git_revision"})


@cache
def installed_version() -> str:
    """The faultline distribution's version (ember ships in it)."""
    try:
        return metadata.version("faultline")
    except metadata.PackageNotFoundError:
        return "unknown"


@cache
def git_revision() -> str:
    """The source tree's commit, with `-dirty` when it has local changes."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(_REPO), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return rev or "unknown"


def stamp(options: dict[str, object]) -> dict[str, object]:
    """Plan `options` with this checkout's version and revision recorded."""
    return {**options, "ember_version": installed_version(), "git_rev": git_revision()}
