"""etcd's default mix applies every kind it draws (marked docker; issue 23, item 2).

One 30 s run of `faultline run --db etcd --seed 5`'s plan with the nemesis on a
timer, so every kill and pause aimed at the leader finds it through etcd's own
status (no phase report names it), and slow catch-up without netem or
failpoints rate-limits the target's links.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from checkers.history import load_history, pair
from harness.plan import Plan
from harness.runner import RunOutcome, run
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def etcd_run(tmp_path_factory: pytest.TempPathFactory) -> RunOutcome:
    """The etcd default plan (register + change-peers under the mix), timed faults."""
    require_docker()
    store = tmp_path_factory.mktemp("store")
    plan = Plan(name="pytest-etcd-faults", db="etcd", seed=5, time_limit_s=30.0,
                workload=("register", "change-peers"), nemesis=("mix",),
                options={"nemesis_mode": "periodic", "nemesis_gap_s": 2.0,
                         "nemesis_targets": ["group-leader"],
                         # the four kinds this test is about: no compact-kill draws
                         "nemesis_kinds": ["partition", "kill", "pause", "slow"],
                         "nemesis_phases": ["catching-up", "stable"]})  # fmt: skip
    return run(plan, store)


def test_the_etcd_mix_applies_pauses_and_slows(etcd_run: RunOutcome) -> None:
    """Pauses and slows are drawn and applied; none fails for want of a leader
    or a failpoint, and the counts reach results.json."""
    assert etcd_run.error is None, etcd_run.error
    faults = etcd_run.result.faults
    assert faults.get("pause", {}).get("applied", 0) + faults.get("kill", {}).get("applied", 0)
    assert faults.get("slow", {}).get("applied", 0) >= 1, faults
    reasons = " ".join(r for c in faults.values() for r in c["reasons"])
    assert "has no failpoints" not in reasons
    assert "placement" not in reasons
    assert "primary" not in reasons


def test_leader_targets_resolve_through_etcd_status(etcd_run: RunOutcome) -> None:
    """Every applied kill or pause names the leader etcd's status reported."""
    ops = pair(load_history(Path(etcd_run.run.path) / "history.jsonl"))
    aimed = [op for op in ops if op.process == "nemesis" and op.f in ("kill", "pause")
             and op.type == "ok"]  # fmt: skip
    assert aimed
    for op in aimed:
        assert op.result["resolved"] == "leader of etcd (status, highest term)", op.result
    slows = [op.result for op in ops if op.process == "nemesis" and op.f == "slow"
             and op.type == "ok"]  # fmt: skip
    assert all(s["method"] in ("netem", "rate-limit") for s in slows)
