"""Property tests: random fault schedules during changePeers keep every invariant.

Each example is one simulated run; the invariant checker runs after every
event (see ember/sim/invariants.py) and the run must then converge after the
heal. A failure prints the command that replays the run.
"""

from __future__ import annotations

from hypothesis import given

from ember.sim.runner import SimConfig, SimResult
from ember.sim.simulation import Simulation
from tests.sim.strategies import sim_configs


def _explain(result: SimResult) -> str:
    lines = [f"{result.kind} failure: {v}" for v in result.violations]
    lines += ["last events:", *result.trace_tail[-10:]]
    lines.append(f"replay: {result.config.replay_command()}")
    return "\n".join(lines)


def _run(config: SimConfig) -> SimResult:
    return Simulation(config).run()


@given(sim_configs(nodes=(3, 4)))
def test_small_groups_stay_safe_and_converge_under_faults_during_changes(config: SimConfig) -> None:
    """3-4 voters: every safety property holds at every step and the group converges after heal."""
    result = _run(config)
    assert result.valid, _explain(result)
    assert result.stats["changes_submitted"] > 0 or result.stats["acked"] > 0


@given(sim_configs(nodes=(5,), sim_seconds=1.5))
def test_five_voter_groups_stay_safe_and_converge_under_faults_during_changes(
    config: SimConfig,
) -> None:
    """5 voters (5 spares for disjoint moves): the same properties hold."""
    result = _run(config)
    assert result.valid, _explain(result)
