"""Property tests: random fault schedules during changePeers keep every invariant.

Each example is one simulated run; the invariant checker runs after every
event (see ember/sim/invariants.py) and the run must then converge after the
heal. A failure prints the command that replays the run.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given

from ember.sim.faults import FAULT_KINDS
from ember.sim.runner import SimConfig, SimResult
from ember.sim.simulation import Simulation
from ember.sim.workload import CHANGE_KINDS
from tests.sim.strategies import sim_configs


def _explain(result: SimResult) -> str:
    lines = [f"{result.kind} failure: {v}" for v in result.violations]
    lines += ["last events:", *result.trace_tail[-10:]]
    lines.append(f"replay: {result.config.replay_command()}")
    return "\n".join(lines)


def _run(config: SimConfig) -> SimResult:
    return Simulation(config).run()


@pytest.mark.slow
@given(sim_configs(nodes=(3, 4)))
def test_small_groups_stay_safe_and_converge_under_faults_during_changes(config: SimConfig) -> None:
    """3-4 voters: every safety property holds at every step and the group converges after heal."""
    result = _run(config)
    assert result.valid, _explain(result)
    event(f"changes ok: {min(result.stats['changes'].get('ok', 0), 3)}+")


@pytest.mark.slow
@given(sim_configs(nodes=(5,), sim_seconds=1.5))
def test_five_voter_groups_stay_safe_and_converge_under_faults_during_changes(
    config: SimConfig,
) -> None:
    """5 voters (5 spares for disjoint moves): the same properties hold."""
    result = _run(config)
    assert result.valid, _explain(result)


@pytest.mark.slow
def test_the_workload_exercises_every_change_kind_and_fault_kind() -> None:
    """Not vacuous: default runs complete every kind of change, under every kind of fault."""
    kinds_ok: set[str] = set()
    faults: set[str] = set()
    acked = 0
    for seed in range(1, 4):
        sim = Simulation(SimConfig(seed=seed, nodes=5, sim_seconds=10.0))
        result = sim.run()
        assert result.valid, _explain(result)
        kinds_ok |= {c.kind for c in sim.workload.changes if c.outcome == "ok"}
        faults |= set(result.stats["faults"])
        acked += result.stats["acked"]
    assert kinds_ok == set(CHANGE_KINDS)
    assert faults == set(FAULT_KINDS)
    assert acked > 1000
