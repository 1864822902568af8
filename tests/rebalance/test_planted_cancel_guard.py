"""Planted defect `rebalance.cancel-without-revision-guard` on a real 5-node
cluster, caught by checkers/assignments.py from the nodes' audit logs.

A cancel must name the pending write it cancels (seed 004: the invoke checks
pending's revision), so a cancel racing a finished rebalance cannot cancel
the next one. The admin cancel names a stale pending revision here: without
the failpoint it is refused and the logs are clean; with it the cancel is
written and the checker reports `cancel-wrong-pending`.
"""

from __future__ import annotations

from typing import Any

from checkers.assignments import check_assignments
from tests.node.cluster import ProcCluster
from tests.rebalance.flow import alter, assignments, audit, failpoint_all, wait_converged

FAILPOINT = "rebalance.cancel-without-revision-guard"


def _pending_writes(cluster: ProcCluster, p: int) -> list[int]:
    """The revisions at which partition p's pending was set (deduped, in order)."""
    revs = {
        ev["revision"]
        for evs in audit(cluster).values()
        for ev in evs
        if ev["kind"] == "assignments-written"
        and ev["partition"] == p
        and any(k.endswith(".pending") and v["new"] for k, v in ev["keys"].items())
    }
    return sorted(revs)  # fmt: skip


def _kinds(cluster: ProcCluster) -> list[str]:
    anomalies, _ = check_assignments(audit(cluster))
    return [a.kind for a in anomalies]


def _cancel(cluster: ProcCluster, p: int, revision: int) -> tuple[int, Any]:
    body = {"partition": p, "pending_revision": revision}
    return cluster.call("n1", "POST", "/admin/cancel-rebalance", body)


def test_a_stale_cancel_is_refused_unless_the_guard_is_planted_away(
    cluster: ProcCluster,
) -> None:
    """pending written twice; a cancel naming the first write: refused (clean),
    then with the failpoint on n1 written and flagged."""
    alter(cluster, replicas=4)
    wait_converged(cluster)
    p = 0
    added = next(n for n in cluster.names if n not in assignments(cluster)[p]["stable"])
    # Appends to the node five replicas add dropped: the change stays pending.
    failpoint_all(cluster, "raft.append.drop", {"peer": added})
    try:
        alter(cluster, replicas=5)
        cluster.wait_for(lambda: bool(assignments(cluster)[p].get("pending")),
                         "partition 0 to have a pending change")  # fmt: skip
        writes = _pending_writes(cluster, p)
        assert len(writes) >= 2, writes
        stale, current = writes[-2], writes[-1]
        code, doc = _cancel(cluster, p, stale)
        assert code == 200, doc
        assert doc["succeeded"] is False, doc
        assert _kinds(cluster) == []
        code, doc = cluster.call("n1", "POST", f"/admin/failpoints/{FAILPOINT}", {})
        assert code == 200, doc
        code, doc = _cancel(cluster, p, stale)
        assert (code, doc["succeeded"], doc["pending_revision"]) == (200, True, stale), doc
        assert stale != current
        cluster.wait_for(lambda: "cancel-wrong-pending" in _kinds(cluster),
                         "the checker to flag the unguarded cancel")  # fmt: skip
    finally:
        failpoint_all(cluster, "raft.append.drop", None)
        cluster.call("n1", "DELETE", f"/admin/failpoints/{FAILPOINT}")
