"""The Raft audit checker catches planted Raft bugs on the simulator's real output.

The simulator's own invariants see every planted bug in process; these tests
hold the audit checker to the same on what reaches events.jsonl, the only
evidence a real cluster leaves. Each bug the checker can see from events is
searched on a bounded set of seeds; the catching seed without the bug must
pass, so the catch is the bug's doing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkers.api import CheckContext, CheckerResult
from checkers.audit import load_audit
from checkers.raft import RaftChecker
from ember.sim import __main__ as sim_cli
from ember.sim.cluster import Cluster
from ember.sim.runner import SimConfig
from ember.sim.simulation import Simulation
from tests.checkers.strategies import RaftScript

SEARCH_SEEDS = 12
BASE: dict[str, Any] = {"nodes": 3, "sim_seconds": 3.0, "heal_seconds": 10.0, "compact_every": 0}

# (bug, knobs where it matters, the anomaly kind the checker must report).
# commit-previous-term and count-learners break commits of ordinary entries,
# which leave no audit event, so only the simulator's invariants see them.
VISIBLE_BUGS: list[tuple[str, dict[str, Any], str]] = [
    ("skip-joint", {}, "joint-skipped"),
    ("skip-catchup", {"catchup_margin": 3}, "joint-before-catchup"),
    ("single-majority-joint", {"change_ms": 100.0}, "commit-without-quorum"),
]


def _raft_on_events(directory: Path) -> CheckerResult:
    audit = load_audit(directory)
    assert audit, f"no events under {directory}"
    return RaftChecker().check(CheckContext(audit=audit))


def _simulate(tmp: Path, seed: int, bug: str | None, knobs: dict[str, Any]) -> CheckerResult:
    sim = Simulation(SimConfig(seed=seed, bug=bug, **BASE, **knobs))
    sim.run()
    sim.write_events(tmp / "nodes")
    return _raft_on_events(tmp)


@pytest.mark.parametrize(("bug", "knobs", "kind"), VISIBLE_BUGS, ids=[b[0] for b in VISIBLE_BUGS])
def test_planted_bug_is_flagged_from_the_simulators_events(
    tmp_path: Path, bug: str, knobs: dict[str, Any], kind: str
) -> None:
    """Within SEARCH_SEEDS seeds the checker reports the bug; that seed without it passes."""
    for seed in range(SEARCH_SEEDS):
        found = _simulate(tmp_path / f"{seed}-bug", seed, bug, knobs)
        if kind in {a.kind for a in found.anomalies}:
            break
    else:
        pytest.fail(f"raft checker never reported {kind} for {bug} in {SEARCH_SEEDS} seeds")
    clean = _simulate(tmp_path / f"{seed}-clean", seed, None, knobs)
    assert clean.valid is True, clean.anomalies


def test_cli_run_stopped_by_a_violation_leaves_the_evidence(tmp_path: Path) -> None:
    """`python -m ember.sim --bug skip-joint --events-dir` exits 1 and the checker agrees."""
    argv = ["--seed", "5", "--bug", "skip-joint", "--quiet", "--events-dir"]
    assert sim_cli.main([*argv, str(tmp_path / "nodes")]) == 1
    result = _raft_on_events(tmp_path)
    assert "joint-skipped" in {a.kind for a in result.anomalies}, result.anomalies


def test_cli_writes_the_events_of_a_crashed_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that crashes midway exits 2 and still writes every node's events so far."""
    real = Cluster.handle
    calls = 0

    def crash_later(self: Cluster, kind: str, payload: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls > 3000:
            raise RuntimeError("injected")
        return real(self, kind, payload)

    monkeypatch.setattr(Cluster, "handle", crash_later)
    argv = ["--seed", "1", "--nodes", "3", "--quiet", "--events-dir", str(tmp_path / "nodes")]
    assert sim_cli.main(argv) == 2
    audit = load_audit(tmp_path)
    assert audit is not None
    assert sorted(audit) == ["n1", "n2", "n3", "n4", "n5", "n6"]
    assert any(ev["kind"] == "role" for ev in audit["n1"] + audit["n2"] + audit["n3"])


def test_simulated_restart_is_announced_like_the_node_daemons() -> None:
    """Each start emits `started` then the configuration the node starts with."""
    sim = Simulation(SimConfig(seed=2, nodes=3, sim_seconds=1.0, faults=("crash",)))
    sim.run()
    events = sim.cluster.nodes["n1"].events
    starts = [i for i, ev in enumerate(events) if ev["kind"] == "started"]
    assert len(starts) == 1 + sim.cluster.nodes["n1"].crashes
    for i in starts:
        assert "group" not in events[i]
        assert events[i + 1]["kind"] == "config-applied"


def test_leader_removed_by_an_uncommitted_config_may_still_be_elected() -> None:
    """A voter of the previous configuration may lead while its removal is uncommitted."""
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1")
    for n in ("n1", "n2", "n3"):  # n3's removal, appended but not committed
        script.emit(n, "config-applied", index=9, peers=["n1", "n2"], old_peers=None)
    script.leader = None
    script.elect("n3")
    result = RaftChecker().check(CheckContext(audit=script.events))
    assert "leader-not-voter" not in {a.kind for a in result.anomalies}, result.anomalies
    for n in ("n1", "n2", "n3"):  # once committed, n3 may no longer lead
        script.emit(n, "config-committed", index=9, peers=["n1", "n2"], old_peers=None)
    script.elect("n3")
    result = RaftChecker().check(CheckContext(audit=script.events))
    assert "leader-not-voter" in {a.kind for a in result.anomalies}


def test_config_committed_without_a_majority_storing_it_is_flagged() -> None:
    """A joint entry stored by the new majority only cannot have been committed."""
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1")
    joint = {"index": 5, "peers": ["n1", "n4", "n5"], "old_peers": ["n1", "n2", "n3"]}
    for n in ("n1", "n4", "n5"):
        script.emit(n, "config-appended", **joint)
    script.emit("n1", "config-committed", **joint)
    kinds = {a.kind for a in RaftChecker().check(CheckContext(audit=script.events)).anomalies}
    assert "commit-without-quorum" in kinds
    script.emit("n2", "config-appended", **joint)  # now a majority of the old set too
    kinds = {a.kind for a in RaftChecker().check(CheckContext(audit=script.events)).anomalies}
    assert "commit-without-quorum" not in kinds


def test_bootstrap_configuration_needs_no_stored_entry() -> None:
    """A configuration committed without any entry (bootstrap) is not judged for a quorum."""
    boot = {"index": 1, "peers": ["n1", "n2", "n3"], "old_peers": None, "group": "g"}
    audit = {
        n: [{"kind": "config-committed", "node": n, "term": 1, "mono_ns": 1, **boot}]
        for n in ("n1", "n2", "n3")
    }
    result = RaftChecker().check(CheckContext(audit=audit))
    assert result.valid is True, result.anomalies
    assert result.figures["checks"]["commit-quorum"] == 0
