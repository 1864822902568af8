"""A planted ember defect the cancel-race workload must expose (marked docker).

With `rebalance.cancel-without-revision-guard` on, the admin cancel skips
its pending-revision check, so the workload's cancels that name a stale
pending revision on purpose get written: the revisions checker (its
assignment rules) must call the run invalid.
"""

from __future__ import annotations

import pytest

from checkers.history import load_history, pair
from ember.failpoints import KNOWN
from harness.plan import Plan
from harness.runner import run
from tests.harness.cluster_fixtures import require_docker

pytestmark = pytest.mark.docker

GUARD = "rebalance.cancel-without-revision-guard"


def test_cancels_without_the_revision_guard_are_found_invalid(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A stale-named cancel is written; the run is invalid, by the revisions checker."""
    require_docker()
    assert GUARD in KNOWN
    plan = Plan(
        name="pytest-planted-cancel", seed=4713, nodes=("n1", "n2", "n3", "n4", "n5"),
        concurrency=4, rate_hz=20.0, time_limit_s=40.0, quiet_s=3.0, nemesis=(),
        workload=("register", "cancel-race"),
        options={"cancel_interval_s": 1.5, "failpoints": {GUARD: {}}},
    )  # fmt: skip
    out = run(plan, tmp_path_factory.mktemp("store"))
    stale = [
        op
        for op in pair(load_history(out.run.history))
        if op.f == "cancel-rebalance" and isinstance(op.result, dict) and op.result.get("stale")
    ]
    assert stale, "the workload sent no stale cancel"
    # Without the guard, a stale-named cancel is accepted, never rejected.
    assert not [op for op in stale if op.result.get("outcome") == "rejected-stale"]
    revisions = out.result.checkers["revisions"]
    assert revisions.valid is False
    assert "cancel-wrong-pending" in {a.kind for a in revisions.anomalies}
    assert out.result.valid is False
    assert out.exit_code == 1
