"""Every module of the project imports on its own, first, in a fresh process.

An import cycle only bites the module imported first (ember.rebalance.listener
imported before ember.placement raised ImportError), which the rest of the
suite, importing in its own order, never does.
"""

from __future__ import annotations

import subprocess
import sys

from tests.paths import REPO_ROOT

PACKAGES = ("ember", "harness", "checkers", "workloads", "nemesis", "pipeline")

# One interpreter: before each module, every project module is forgotten, so
# each is the first import of its process as far as the cycle is concerned.
_SCRIPT = """
import importlib, pkgutil, sys
roots = sys.argv[1:]
names = []
for root in roots:
    package = importlib.import_module(root)
    names.append(root)
    names += [m.name for m in pkgutil.walk_packages(package.__path__, root + ".")]
failed = []
for name in names:
    for loaded in [k for k in sys.modules if k.split(".")[0] in roots]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print(len(names))
print("\\n".join(failed))
"""


def test_every_module_imports_first() -> None:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *PACKAGES], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    count, *failed = proc.stdout.strip().split("\n")
    assert int(count) > 100  # the walk found the project, not an empty path
    assert [f for f in failed if f] == []
