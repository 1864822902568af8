"""harness.synthetic: complete run dirs judged by the real checkers."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from checkers.audit import load_audit
from checkers.history import load_history, pair
from harness import plan as plans
from harness.synthetic import make_run


def _results(run_path: Path) -> dict:
    return msgspec.json.decode((run_path / "results.json").read_bytes())


def test_valid_run_passes_every_checker(tmp_path: Path) -> None:
    """A run with faults, a change and a rebalance is valid under all five checkers."""
    run = make_run(tmp_path, seed=11, ops=1500)
    results = _results(run.path)
    assert results["valid"] is True
    assert set(results["checkers"]) == {"linearizable", "raft", "revisions", "convergence", "stats"}
    assert all(r["valid"] is True for r in results["checkers"].values())


def test_invalid_run_has_one_planted_stale_read(tmp_path: Path) -> None:
    """valid=False makes the linearizability checker fail on a get, and nothing else."""
    run = make_run(tmp_path, seed=11, ops=1500, valid=False)
    checkers = _results(run.path)["checkers"]
    assert checkers["linearizable"]["valid"] is False
    failure = checkers["linearizable"]["figures"]["failure"]
    assert [u["op"]["f"] for u in failure["unplaceable"]] == ["get"]
    assert all(r["valid"] is True for n, r in checkers.items() if n != "linearizable")


def test_run_dir_holds_the_store_layout(tmp_path: Path) -> None:
    """test.json is a loadable plan, the history validates and every node has events."""
    run = make_run(tmp_path, seed=5, ops=300)
    plan = plans.load(run.plan)
    assert plan.seed == 5
    assert plan.backend == "sim"
    history = load_history(run.history)
    ops = pair(history)
    assert sum(1 for op in ops if isinstance(op.process, int)) == 300
    assert {op.f for op in ops if op.process == "nemesis"} == {
        "partition", "heal-partition", "kill", "start"
    }  # fmt: skip
    audit = load_audit(run.path)
    assert audit is not None
    assert sorted(audit) == list(plan.nodes)
    kinds = {ev["kind"] for evs in audit.values() for ev in evs}
    assert {"leader", "config-committed", "change-stage", "assignments-written"} <= kinds


def test_options_switch_parts_of_the_story_off(tmp_path: Path) -> None:
    """Without faults, changes and rebalance the history has no admin or nemesis ops."""
    run = make_run(tmp_path, seed=2, ops=200, faults=False, changes=False, rebalance=False)
    ops = pair(load_history(run.history))
    assert all(isinstance(op.process, int) for op in ops)
    audit = load_audit(run.path) or {}
    kinds = {ev["kind"] for evs in audit.values() for ev in evs}
    assert "assignments-written" not in kinds
    assert "change-stage" not in kinds
    assert _results(run.path)["valid"] is True


def test_same_seed_gives_the_same_history(tmp_path: Path) -> None:
    """The history and audit logs depend only on the arguments."""
    a = make_run(tmp_path / "a", seed=9, ops=400, valid=False, started=1.7e9)
    b = make_run(tmp_path / "b", seed=9, ops=400, valid=False, started=1.7e9)
    assert a.history.read_bytes() == b.history.read_bytes()
    assert a.events("n1").read_bytes() == b.events("n1").read_bytes()


def test_zero_operations_is_refused(tmp_path: Path) -> None:
    """ops must be positive."""
    with pytest.raises(ValueError, match="at least one operation"):
        make_run(tmp_path, seed=1, ops=0)
