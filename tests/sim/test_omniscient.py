"""The omniscient checker, the `sim` checker that reads its report, and `python -m ember.sim`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from checkers.api import CheckContext
from checkers.compose import select
from checkers.sim import SimInvariantsChecker
from ember.raft import ConfState, Entry, HardState, PersistedState, Ready, Snapshot, SnapshotMeta
from ember.raft import Status as RaftStatus
from ember.raft.facade import Role
from ember.raft.messages import RequestVoteResp
from ember.runtime import NodeRuntime
from ember.sim.__main__ import translate
from ember.sim.omniscient import Omniscient
from harness import plan as plans
from harness.cli import main as faultline
from harness.progress import RunStatus
from harness.runner import run

CONF = ConfState(peers=("n1", "n2", "n3"))


def _boot() -> PersistedState:
    return PersistedState(hard_state=HardState(),
                          snapshot=Snapshot(meta=SnapshotMeta(index=0, term=0, conf=CONF)),
                          entries=[])  # fmt: skip


def _status(
    node: str,
    role: Role,
    term: int,
    conf: ConfState = CONF,
    commit: int = 0,
    stage: str = "none",
    token: int = 0,
) -> RaftStatus:
    return RaftStatus(id=node, group="g", role=role, term=term, leader=None, commit=commit,
                      applied=0, last_index=0, conf=conf, stage=stage, token=token,
                      progress={})  # fmt: skip


def _ready(entries: list[Entry], hs: HardState | None = None) -> Ready:
    return Ready(messages=[], entries=entries, hard_state=hs, snapshot=None,
                 committed_entries=[], events=[], change_results=[])  # fmt: skip


def _checker() -> Omniscient:
    checker = Omniscient(lambda: 1.5, catchup_margin=1000)
    for node in CONF.peers:
        checker.on_start(node, "g", _boot())
    return checker


def test_two_leaders_of_one_term_are_a_violation() -> None:
    """one-leader-per-term, with node, group and virtual time."""
    checker = _checker()
    checker.on_status("n1", "g", _status("n1", "leader", 2))
    checker.on_status("n2", "g", _status("n2", "leader", 2))
    props = {(v.prop, v.node, v.group, v.at_s) for v in checker.violations}
    assert ("one-leader-per-term", "n2", "g", 1.5) in props


def test_a_committed_entry_applied_differently_is_a_violation() -> None:
    """state-machine-safety across nodes of one group."""
    checker = _checker()
    checker.on_applied("n1", "g", Entry(index=1, term=1, data=b"a"))
    checker.on_applied("n2", "g", Entry(index=1, term=1, data=b"b"))
    checker.on_applied("n3", "other", Entry(index=1, term=1, data=b"c"))  # another group
    assert [v.prop for v in checker.violations] == ["state-machine-safety"]


def test_a_stable_to_stable_change_breaks_the_config_chain() -> None:
    """config-chain on a configuration entry written by any node."""
    checker = _checker()
    entry = Entry(index=1, term=1, kind="config", conf=ConfState(peers=("n1", "n4")))
    checker.on_write("n2", "g", _ready([entry]), _status("n2", "follower", 1, entry.conf))
    assert [v.prop for v in checker.violations] == ["config-chain"]


def test_a_vote_granted_in_a_ready_that_also_moved_on_still_counts() -> None:
    """election-quorum: a Ready can grant a vote and then take a higher term, hiding
    the grant from its hard state; the granted reply counts (old sim seed 329)."""
    checker = _checker()
    grant = RequestVoteResp(group="g", src="n2", dst="n1", term=2, granted=True)
    checker.on_write("n1", "g", _ready([], HardState(term=2, vote="n1")),
                     _status("n1", "candidate", 2))  # fmt: skip
    moved_on = Ready(messages=[grant], entries=[], hard_state=HardState(term=3), snapshot=None,
                     committed_entries=[], events=[], change_results=[])  # fmt: skip
    checker.on_write("n2", "g", moved_on, _status("n2", "follower", 3))
    checker.on_status("n1", "g", _status("n1", "leader", 2))
    assert checker.violations == []
    assert checker.checks["election-quorum"] == 1
    checker.on_status("n3", "g", _status("n3", "leader", 4))  # no votes recorded at all
    assert [v.prop for v in checker.violations] == ["election-quorum"]


def test_the_checkers_own_failure_is_kept_not_raised() -> None:
    """A broken observation never raises into the node; the report says unknown."""
    checker = _checker()
    checker.on_write("n1", "g", None, _status("n1", "follower", 1))  # type: ignore[arg-type]
    assert checker.errors
    result = SimInvariantsChecker().check(CheckContext(sim=checker.report()))
    assert result.valid == "unknown"


def test_the_sim_checker_is_selected_only_where_a_report_exists() -> None:
    """Docker runs leave no sim-invariants.json and do not run it."""
    assert "sim" not in select(None, {}, has_audit=True)
    assert "sim" in select(None, {}, has_audit=True, has_sim=True)


def test_a_sim_run_reports_the_invariants_and_leaves_no_observer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sim-invariants.json in the run dir, the `sim` verdict in results.json and
    in `faultline check RUN_DIR`."""
    plan = plans.Plan(seed=2, backend="sim", time_limit_s=4.0, quiet_s=2.0,
                      workload=("register", "change-peers"), nemesis=("kill",))  # fmt: skip
    outcome = run(plan, tmp_path, status=RunStatus())
    assert outcome.error is None, outcome.error
    report = json.loads((outcome.run.path / "sim-invariants.json").read_text())
    assert report["violations"] == []
    assert report["checks"]["log-matching"] > 0
    assert "part-0" in report["groups"]
    results = json.loads((outcome.run.path / "results.json").read_text())
    assert results["checkers"]["sim"]["valid"] is True
    assert NodeRuntime.observers == []
    capsys.readouterr()
    assert faultline(["check", str(outcome.run.path), "--no-write"]) == 0
    assert re.search(r"^  sim +valid", capsys.readouterr().out, re.MULTILINE)


def test_python_m_ember_sim_is_faultline_run_backend_sim() -> None:
    """--bug becomes the planted_bugs node setting; the rest passes through."""
    assert translate(["--seed", "3", "--bug", "skip-joint", "--bug=count-learners"]) == [
        "run", "--backend", "sim", "--seed", "3",
        "--db-setting", "planted_bugs=skip-joint,count-learners",
    ]  # fmt: skip


@pytest.mark.parametrize("same", [True, False])
def test_writing_back_a_committed_entry_is_no_truncation(same: bool) -> None:
    """Sim sweep seed 56: a follower back from a pause took the new leader's
    append from the index it already held, writing (2954, 17) again before
    (2955, 20); only a different entry at a committed index is a violation."""
    checker = _checker()
    e1, e2 = Entry(index=1, term=1, data=b"a"), Entry(index=2, term=1, data=b"b")
    checker.on_write("n2", "g", _ready([e1, e2], HardState(term=1, vote="n1", commit=2)),
                     _status("n2", "follower", 1))  # fmt: skip
    checker.on_durable("n2", "g", _ready([e1, e2]))
    again = e2 if same else Entry(index=2, term=2, data=b"x")
    checker.on_write("n2", "g", _ready([again, Entry(index=3, term=2, data=b"c")]),
                     _status("n2", "follower", 2))  # fmt: skip
    truncated = [v for v in checker.violations if "truncated" in v.detail]
    assert bool(truncated) is not same, checker.violations
