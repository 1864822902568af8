"""Same seed, same trace: the simulator replays bit-exactly."""

from __future__ import annotations

from ember.sim.runner import SimConfig
from ember.sim.seeds import LATE_SUBSYSTEMS, SUBSYSTEMS, Seeds
from ember.sim.simulation import Simulation

SMALL = {"nodes": 3, "sim_seconds": 1.5, "heal_seconds": 10.0}


def test_same_seed_gives_identical_trace_hash() -> None:
    """Two runs of one seed hash their traces identically."""
    first = Simulation(SimConfig(seed=42, **SMALL)).run()  # type: ignore[arg-type]
    second = Simulation(SimConfig(seed=42, **SMALL)).run()  # type: ignore[arg-type]
    assert first.events > 1000
    assert first.trace_hash == second.trace_hash
    assert first.stats | {"wall_seconds": 0} == second.stats | {"wall_seconds": 0}


def test_different_seeds_give_different_traces() -> None:
    """Another seed gives another run."""
    hashes = {Simulation(SimConfig(seed=s, **SMALL)).run().trace_hash for s in (1, 2, 3)}  # type: ignore[arg-type]
    assert len(hashes) == 3


def test_a_planted_bug_changes_the_trace() -> None:
    """The trace covers the core's behaviour, not just the schedule."""
    plain = Simulation(SimConfig(seed=5, **SMALL)).run()  # type: ignore[arg-type]
    bugged = Simulation(SimConfig(seed=5, bug="skip-catchup", **SMALL)).run()  # type: ignore[arg-type]
    assert plain.trace_hash != bugged.trace_hash


def test_sub_seeds_are_derived_in_a_fixed_order() -> None:
    """Subsystems first, then one per node, then late ones; adding nodes keeps
    every other sub-seed."""
    three = Seeds(7, ["n1", "n2", "n3"])
    four = Seeds(7, ["n1", "n2", "n3", "n4"])
    names = [name for name, _ in four.describe()]
    nodes = ["node-n1", "node-n2", "node-n3", "node-n4"]
    assert names == [*SUBSYSTEMS, *nodes, *LATE_SUBSYSTEMS]
    assert set(three.describe()) == set(four.describe()) - {("node-n4", four.sub("node-n4"))}
    assert len({value for _, value in four.describe()}) == len(names)
    assert Seeds(8, ["n1"]).sub("network") != three.sub("network")


def test_replay_command_names_every_non_default_setting() -> None:
    """The printed replay command rebuilds the same configuration."""
    config = SimConfig(seed=9, nodes=3, bug="skip-joint", faults=("crash", "pause"))
    command = config.replay_command()
    assert command.startswith("python -m ember.sim --seed 9 --nodes 3")
    assert "--bug skip-joint" in command
    assert "--faults crash,pause" in command


def test_trace_is_identical_across_processes_with_different_hash_seeds() -> None:
    """Set/dict iteration order never leaks into a run: PYTHONHASHSEED does not matter."""
    import os
    import subprocess
    import sys

    def trace_line(hash_seed: str) -> str:
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "ember.sim",
                "--seed",
                "4",
                "--nodes",
                "3",
                "--quiet",
                "--sim-seconds",
                "1",
                "--heal-seconds",
                "10",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        ).stdout
        return next(line for line in out.splitlines() if " trace " in line).split(" trace ")[1]

    assert trace_line("1") == trace_line("2")


def test_missing_the_convergence_bound_is_a_liveness_failure_not_safety() -> None:
    """A heal bound too short to converge is reported as liveness, apart from safety."""
    result = Simulation(SimConfig(seed=3, nodes=3, sim_seconds=1.0, heal_seconds=0.01)).run()
    assert result.kind == "liveness"
    assert result.violations[0].prop == "liveness-after-heal"
    assert "not converged" in result.violations[0].detail


def test_an_explicit_schedule_replaces_the_seeded_one() -> None:
    """Exactly the listed faults are injected, and the schedule survives the replay command."""
    from ember.sim.faults import Fault, parse_schedule

    crash = Fault(at_ns=500_000_000, kind="crash", duration_ns=300_000_000, target="leader")
    config = SimConfig(seed=1, nodes=3, sim_seconds=1.5, heal_seconds=10.0, schedule=(crash,))
    result = Simulation(config).run()
    assert result.valid
    assert result.stats["faults"] == {"crash": 1}
    assert result.stats["crashes"] == 1
    flag = config.replay_command().split("--schedule ")[1].split()[0]
    assert parse_schedule(flag) == (crash,)
