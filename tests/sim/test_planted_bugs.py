"""The property checks can fail: each planted bug is caught within a few seeds.

For each RaftConfig.planted_bugs defect, search a bounded number of seeds
with a setting where the defect matters, and assert the checker reports the
safety property that the defect breaks. The same setting without the bug
must not report that property on the catching seed, so the catch is the
bug's doing.
"""

from __future__ import annotations

from typing import Any

import pytest

from ember.sim.runner import SimConfig, SimResult
from ember.sim.simulation import Simulation

SEARCH_SEEDS = 60
# compact_every=0 keeps these searches about the defect under test.
BASE: dict[str, Any] = {"nodes": 3, "sim_seconds": 3.0, "heal_seconds": 10.0, "compact_every": 0}
PARTITIONS = ("partition", "isolate", "one-way")

CASES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("skip-joint", {}, {"config-chain"}),
    ("skip-catchup", {"catchup_margin": 3}, {"catchup-margin"}),
    (
        "commit-previous-term",
        {"max_append": 1, "propose_ms": 3.0},
        {"commit-current-term", "leader-completeness", "state-machine-safety"},
    ),
    (
        "count-learners",
        {"change_ms": 100.0, "faults": PARTITIONS},
        {"quorum-commit", "election-quorum", "one-leader-per-term", "state-machine-safety"},
    ),
    (
        "single-majority-joint",
        {"change_ms": 100.0},
        {"joint-both-majorities", "quorum-commit", "state-machine-safety"},
    ),
]


def _first_catch(bug: str, knobs: dict[str, Any], props: set[str]) -> tuple[int, SimResult] | None:
    for seed in range(SEARCH_SEEDS):
        result = Simulation(SimConfig(seed=seed, bug=bug, **BASE, **knobs)).run()
        if result.kind == "safety" and result.violations[0].prop in props:
            return seed, result
    return None


@pytest.mark.slow
@pytest.mark.parametrize(("bug", "knobs", "props"), CASES, ids=[c[0] for c in CASES])
def test_planted_bug_is_caught_by_the_property_it_breaks(
    bug: str, knobs: dict[str, Any], props: set[str]
) -> None:
    """Within SEARCH_SEEDS seeds the checker reports the broken property."""
    found = _first_catch(bug, knobs, props)
    assert found is not None, f"{bug} not caught in {SEARCH_SEEDS} seeds"
    seed, result = found
    assert f"--bug {bug}" in result.config.replay_command()
    clean = Simulation(SimConfig(seed=seed, **BASE, **knobs)).run()
    clean_props = {v.prop for v in clean.violations}
    assert not (clean_props & props), f"seed {seed} fails {clean_props} without {bug} too"
