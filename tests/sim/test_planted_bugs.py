"""The omniscient invariants can fail: each planted core bug is caught within a few seeds.

Each RaftConfig.planted_bugs defect is switched on through the node setting
`planted_bugs` (the TOML key ember-node reads) in a short whole-system plan
where the defect matters: register traffic and a membership change every
second, plus the Raft tunables, plan options and nemesis kinds that expose
it. Within SEARCH_SEEDS seeds the `sim` checker (ember.sim.omniscient's
report) must name a safety property the defect breaks, and where the defect
shows in the audit events (configuration entries), the raft checker must
report it on the same run from events.jsonl alone: the only evidence a real
cluster leaves. The same plan without the bug must not report those on the
catching seed, so the catch is the bug's doing. (commit-previous-term and
count-learners break commits of ordinary entries, which leave no audit event:
only the omniscient checker sees them.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import plan as plans
from harness.progress import RunStatus
from harness.runner import run

pytestmark = pytest.mark.slow
SEARCH_SEEDS = range(1, 9)


class Case:
    """One planted bug and the plan that exposes it."""

    def __init__(self, bug: str, props: set[str], *, audit: str | None = None,
                 db: dict[str, Any] | None = None, options: dict[str, Any] | None = None,
                 nemesis: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.bug, self.props, self.audit = bug, props, audit
        self.db, self.options, self.nemesis = db or {}, options or {}, nemesis

    def plan(self, seed: int, *, planted: bool) -> plans.Plan:
        db = {**self.db, "planted_bugs": self.bug} if planted else dict(self.db)
        return plans.Plan(seed=seed, backend="sim", time_limit_s=10.0, quiet_s=3.0,
                          workload=("register", "change-peers"), nemesis=self.nemesis,
                          db_settings=db,
                          options={"change_interval_s": 1.0, "nemesis_gap_s": 2.0,
                                   **self.options})  # fmt: skip


CASES = [
    # Any change goes stable -> stable.
    Case("skip-joint", {"config-chain"}, audit="joint-skipped"),
    # New voters from an empty log are more than 3 entries behind the leader.
    Case(
        "skip-catchup", {"catchup-margin"}, audit="joint-before-catchup", db={"catchup_margin": 3}
    ),
    # One entry per append keeps old-term entries trickling to a lagging
    # follower after an election, so the new leader counts a majority on one.
    Case(
        "commit-previous-term",
        {"commit-current-term", "leader-completeness", "state-machine-safety"},
        db={"max_entries_per_append": 1},
        nemesis=("partition", "kill"),
    ),
    # Learners exist only when the workload names them.
    Case(
        "count-learners",
        {"quorum-commit", "election-quorum", "one-leader-per-term", "state-machine-safety"},
        options={"change_learners": True},
        nemesis=("partition", "kill"),
    ),
    # Slow links to the old voters let the new majority alone commit the joint
    # entry: changes every 0.5 s, a slow-down every second.
    Case(
        "single-majority-joint",
        {"joint-both-majorities", "quorum-commit", "state-machine-safety"},
        audit="commit-without-quorum",
        options={"change_interval_s": 0.5, "nemesis_gap_s": 1.0},
        nemesis=("slow",),
    ),
]


def _reported(plan: plans.Plan, store: Path) -> tuple[set[str], Path]:
    """What the `sim` and `raft` checkers reported for a run of `plan`, and its run dir."""
    outcome = run(plan, store, status=RunStatus())
    assert outcome.error is None, outcome.error
    sim, raft = outcome.result.checkers["sim"], outcome.result.checkers["raft"]
    props = {a.kind for a in sim.anomalies}
    assert (sim.valid is False) == bool(props), sim
    return props | {a.kind for a in raft.anomalies}, outcome.run.path


@pytest.mark.parametrize("case", CASES, ids=[c.bug for c in CASES])
def test_planted_bug_is_caught_by_the_property_it_breaks(tmp_path: Path, case: Case) -> None:
    """Within SEARCH_SEEDS seeds the sim checker reports a property the bug breaks."""
    for seed in SEARCH_SEEDS:
        kinds, run_dir = _reported(case.plan(seed, planted=True), tmp_path)
        if kinds & case.props and (case.audit is None or case.audit in kinds):
            break
    else:
        raise AssertionError(f"{case.bug} not caught in seeds {list(SEARCH_SEEDS)}")
    recorded = json.loads((run_dir / "test.json").read_text())
    assert recorded["db_settings"]["planted_bugs"] == case.bug  # what `faultline replay` runs
    results = json.loads((run_dir / "results.json").read_text())
    assert results["valid"] is False
    assert results["checkers"]["sim"]["valid"] is False
    clean, _ = _reported(case.plan(seed, planted=False), tmp_path)
    assert not (clean & (case.props | {case.audit})), f"seed {seed}: {clean} without {case.bug}"
