"""The simulator's clients leave a history the linearizability checker judges.

Reads go through the log, so clean runs are linearizable; the planted
client defect `local_reads` (reads off a believed leader's state machine)
must make some seed non-linearizable, and the harness's sim backend must
check the client history rather than skip it.
"""

from __future__ import annotations

import json
from pathlib import Path

from checkers.api import CheckContext
from checkers.history import Event, pair
from checkers.linear import LinearizabilityChecker
from ember.sim.clients import history_rows
from ember.sim.runner import SimConfig
from ember.sim.simulation import Simulation
from harness.plan import Plan
from harness.progress import RunStatus
from harness.sim.single_group import run_sim
from harness.store import new_run

BASE = {"sim_seconds": 6.0, "reads": 0.4}


def _linearizable(sim: Simulation) -> bool | str:
    rows = sorted(history_rows(sim.workload.ops, 0), key=lambda r: r[0])
    events = [Event(index=i, time=t, **fields) for i, (t, fields) in enumerate(rows)]
    result = LinearizabilityChecker().check(CheckContext(events=events, operations=pair(events)))
    return result.valid


def _run(seed: int, **knobs: object) -> Simulation:
    sim = Simulation(SimConfig(seed=seed, **BASE, **knobs))  # type: ignore[arg-type]
    sim.run()
    return sim


def test_clean_runs_are_linearizable_and_exercise_every_outcome() -> None:
    outcomes: set[tuple[str, str | None]] = set()
    for seed in range(3):
        sim = _run(seed)
        assert _linearizable(sim) is True, f"seed {seed}"
        outcomes |= {(op.f, op.type) for op in sim.workload.ops}
        reads = [op for op in sim.workload.ops if op.f == "get" and op.type == "ok"]
        assert any(op.result is not None for op in reads)
    assert {("get", "ok"), ("put", "ok"), ("put", "fail")} <= outcomes
    assert any(kind == "info" for _f, kind in outcomes)


def test_planted_local_reads_are_caught_and_the_same_seed_is_clean_without() -> None:
    caught = next((s for s in range(8) if _linearizable(_run(s, local_reads=True)) is False), None)
    assert caught is not None, "stale local reads never caught in 8 seeds"
    assert _linearizable(_run(caught)) is True


def test_reads_do_not_change_a_run_without_them() -> None:
    # Reads draw from their own sub-seed: a run without them replays as before.
    a = Simulation(SimConfig(seed=5, sim_seconds=3.0)).run()
    b = Simulation(SimConfig(seed=5, sim_seconds=3.0, reads=0.0)).run()
    assert a.trace_hash == b.trace_hash
    c = Simulation(SimConfig(seed=5, sim_seconds=3.0, reads=0.5)).run()
    assert c.trace_hash != a.trace_hash


def test_the_sim_backend_checks_the_client_history(tmp_path: Path) -> None:
    """A few seeds of the planted stale reads through `faultline run --backend sim`'s
    path: one must be stored invalid, with the linearizable checker's verdict."""
    for seed in range(6):
        plan = Plan(
            seed=seed, backend="sim", time_limit_s=8.0, workload=("register", "change-peers"),
            nemesis=("partition", "kill", "pause"), options={"sim_local_reads": True},
        )  # fmt: skip
        run = new_run(tmp_path, plan.name, plan.seed)
        result = run_sim(plan, run, RunStatus())
        lin = result.checkers["linearizable"]
        assert lin.figures["ops"] > 100
        if lin.valid is False:
            assert json.loads((run.path / "results.json").read_text())["valid"] is False
            return
    raise AssertionError("stale local reads never reported through the sim backend in 6 seeds")
