"""The ember image's dependency set: only what ember-node imports, bounded as
pyproject bounds it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata

import pytest

from harness.images import EMBER_NODE_DEPS, ImageBuildError, node_dependencies
from tests.harness.cluster_fixtures import SharedCluster

# Prints the distributions behind every non-stdlib module that importing the
# node daemon loads, in a fresh interpreter so this test's imports do not count.
_PROBE = """
import json, sys
from importlib import metadata
import ember.server, ember.runtime.node
dists = metadata.packages_distributions()
tops = {m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names)
print(json.dumps(sorted({d for t in tops for d in dists.get(t, [])})))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(names: tuple[str, ...]) -> set[str]:
    """`names` and every distribution they require (no extras), installed here."""
    installed = {_canonical(d.metadata["Name"]): d for d in metadata.distributions()}
    seen: set[str] = set()
    todo = [_canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen or name not in installed:
            continue  # not installed here: its environment marker excluded it
        seen.add(name)
        for req in installed[name].requires or []:
            if "extra ==" in req:
                continue
            match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
            if match:
                todo.append(_canonical(match.group(0)))
    return seen


def test_node_dependencies_take_pyprojects_bounds_for_the_wanted_names() -> None:
    """Each wanted name comes back with the version bound pyproject gives it."""
    deps = ["msgspec>=0.18", "pandas>=2.1,<3", "aiohttp[speedups]>=3.9", "rich>=13"]
    assert node_dependencies(deps, ("aiohttp", "msgspec")) == [
        "aiohttp[speedups]>=3.9",
        "msgspec>=0.18",
    ]


def test_a_wanted_name_missing_from_pyproject_is_a_clear_error() -> None:
    """A node dependency pyproject does not list names itself in the error."""
    with pytest.raises(ImageBuildError, match="uvloop not in pyproject"):
        node_dependencies(["msgspec>=0.18"], ("msgspec", "uvloop"))


def test_the_image_leaves_out_the_harness_dependencies() -> None:
    """pandas, pyarrow, plotly and the like stay on the host."""
    names = {_canonical(re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0]) for d in node_dependencies()}
    assert names == {_canonical(n) for n in EMBER_NODE_DEPS}
    assert not names & {"pandas", "pyarrow", "plotly", "numpy", "docker", "paramiko", "rich"}


def test_everything_ember_node_imports_is_in_the_image() -> None:
    """The node daemon's third-party imports are EMBER_NODE_DEPS or what they pull."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    # setuptools shows up through its distutils .pth hook; every venv has it.
    imported = {_canonical(d) for d in json.loads(out)} - {"faultline", "setuptools", "pip"}
    assert imported, "the probe saw no third-party import at all"
    missing = imported - _closure(EMBER_NODE_DEPS)
    assert not missing, f"ember-node imports {sorted(missing)}, not in the image"


@pytest.mark.docker
@pytest.mark.timeout(1800)
def test_node_image_runs_ember_node_without_the_harness_dependencies(
    cluster: SharedCluster,
) -> None:
    """ember-node starts in the image; pandas, pyarrow and plotly are not there."""
    result = cluster.control.run("n1", "/opt/faultline/bin/ember-node --help")
    assert "usage: ember-node" in result.stdout
    host_only = ("pandas", "pyarrow", "plotly", "numpy", "rich")
    probe = f"import importlib.util as u; print(sorted(m for m in {host_only} if u.find_spec(m)))"
    result = cluster.control.run("n1", f'/opt/faultline/bin/python -c "{probe}"')
    assert result.stdout.strip() == "[]"
