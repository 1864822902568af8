"""The audit checkers on the real Raft core's events, from the simulator.

Clean simulated runs (faults, crashes, changes, no planted bug) must pass:
these guard against false positives on the event stream the core really
emits, which the hand-written scripts of the other tests only imitate. (This
check found the core's stale snapshot configuration, since fixed.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkers.api import CheckContext
from checkers.audit import load_audit
from checkers.convergence import ConvergenceChecker
from checkers.raft import RaftChecker

sim = pytest.importorskip("ember.sim.simulation")
runner = pytest.importorskip("ember.sim.runner")


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_clean_simulated_runs_pass_the_audit_checkers(tmp_path: Path, seed: int) -> None:
    """No raft anomaly on clean runs; convergence fails only where the sim saw no convergence."""
    config = runner.SimConfig(seed=seed, sim_seconds=2, heal_seconds=5)
    simulation = sim.Simulation(config)
    result = simulation.run()
    simulation.write_events(tmp_path / "nodes")
    audit = load_audit(tmp_path)
    assert audit
    ctx = CheckContext(audit=audit)
    raft = RaftChecker().check(ctx)
    assert raft.valid is True, raft.anomalies
    assert raft.figures["checks"]["transition"] > 0
    converged = ConvergenceChecker().check(ctx)
    if not result.violations:
        assert converged.valid is True, converged.anomalies
