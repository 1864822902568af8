"""A simulated run's world is freed when the run ends.

A process that plays many runs (explore's workers, a sweep, this suite) kept
each finished world alive, about 9 MB for the default plan, through
aiohttp's process-wide cache of built middleware chains, which is keyed on
the applications (and an application holds its loop); the last ~18 runs
stayed in memory. `harness.simrun` empties that cache after each run, and a
finished loop reports nothing of the powered-off processes' leftovers, which
are collected later, while another run may be logging. Freed worlds are
collected for real now, so their coroutines must already be closed: a
`finally` that awaits, or a close that starts a task, left one suspended,
and the collector warned of it (`ember.sim.loop._abandon`).
"""

from __future__ import annotations

import gc
import logging
import sys
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

from harness import plan as plans
from harness import simrun
from harness.progress import RunStatus
from harness.runner import run

pytestmark = pytest.mark.slow


def test_the_world_is_freed_and_its_leftovers_stay_quiet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loops: list[weakref.ref[Any]] = []
    real = simrun.SimLoop

    def recorded(*args: Any, **kwargs: Any) -> Any:
        loop = real(*args, **kwargs)
        loops.append(weakref.ref(loop))
        return loop

    monkeypatch.setattr(simrun, "SimLoop", recorded)
    plan = plans.Plan(seed=1, backend="sim", time_limit_s=4.0, quiet_s=2.0)
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is None, outcome.error
    del outcome
    caplog.clear()
    unraisable: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: unraisable.append(repr(u.exc_value)))
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        gc.collect()
    assert len(loops) == 1
    assert loops[0]() is None, "the finished run's loop (and so its world) is still referenced"
    # The powered-off nodes' client sessions were never closed: no error to log.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    # A power-off leaves files and sessions open (ResourceWarning, as at any
    # crash); no coroutine may be left suspended or never started.
    assert not [str(w.message) for w in warned if w.category is not ResourceWarning]
    assert not unraisable


def _deleted_descriptors() -> list[str]:
    fds = Path("/proc/self/fd")
    targets = []
    for fd in fds.iterdir():
        try:
            targets.append(str(fd.readlink()))
        except OSError:
            continue  # closed while listed (the listing's own descriptor)
    return [t for t in targets if t.endswith("(deleted)")]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux's /proc")
def test_the_nodes_files_are_closed_when_the_run_ends(tmp_path: Path) -> None:
    """Each simulated node holds its WAL and the WAL's lock open by raw
    descriptor; a run that ends with the node running used to leave both
    open in the process after its scratch dir was deleted: ten descriptors
    and the WALs' disk space per 5-node run, which an explore worker piled
    up run after run (650 descriptors, 214 MB after 65 runs). A run's
    descriptors are closed before the run returns; the audit logs' file
    objects with the collection of the world."""
    before = len(_deleted_descriptors())
    plan = plans.Plan(seed=1, backend="sim", time_limit_s=4.0, quiet_s=2.0)
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is None, outcome.error
    del outcome
    gc.collect()  # the audit logs' file objects go with their freed worlds (above)
    assert len(_deleted_descriptors()) == before, _deleted_descriptors()
