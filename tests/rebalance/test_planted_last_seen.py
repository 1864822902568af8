"""Planted defect `rebalance.ignore-last-seen` on a real 5-node cluster, caught
by checkers/assignments.py from the nodes' audit logs.

A primary must skip any request older than the last revision it has seen
(seed 004), so a deposed placement driver cannot undo a newer decision. A
Rebalance request stamped below the primary's last seen revision is sent to
it directly after the driver's newer ones: without the failpoint it is
ignored and the logs are clean; with it the primary acts on it and the
checker reports `stale-request-applied`.
"""

from __future__ import annotations

from typing import Any

from checkers.assignments import check_assignments
from tests.node.cluster import ProcCluster
from tests.rebalance.flow import alter, assignments, audit, call_any, wait_converged

FAILPOINT = "rebalance.ignore-last-seen"


def _kinds(cluster: ProcCluster) -> list[str]:
    anomalies, _ = check_assignments(audit(cluster))
    return [a.kind for a in anomalies]


def _stale_request(cluster: ProcCluster) -> tuple[str, dict[str, Any]]:
    """Partition 0's primary and a request one revision below its last seen,
    repeating the settled assignment (so acting on it moves nothing)."""
    holder = call_any(cluster, "GET", "/admin/placement")["leases"]["0"]["holder"]
    last = cluster.call(holder, "GET", "/admin/placement")[1]["this_node"]["last_seen"]
    stable = assignments(cluster)[0]["stable"]
    body = {"zone": "default", "partition": 0, "revision": last["default/0"] - 1,
            "pending_revision": -1, "old": stable, "new": stable}  # fmt: skip
    return holder, body


def _applied(cluster: ProcCluster, holder: str, revision: int) -> list[dict[str, Any]]:
    return [ev for ev in cluster.events(holder) if ev["kind"] == "rebalance-request"
            and ev.get("direction") == "applied"
            and ev["request_revision"] == revision]  # fmt: skip


def test_a_stale_request_is_ignored_unless_last_seen_is_planted_away(
    cluster: ProcCluster,
) -> None:
    """After a rebalance the driver sent (so the primary has seen newer requests),
    a stale one: ignored and clean; then with the failpoint applied and flagged."""
    alter(cluster, replicas=4)
    wait_converged(cluster)
    holder, body = _stale_request(cluster)
    code, doc = cluster.call(holder, "POST", "/internal/rebalance", body)
    assert (code, doc["state"]) == (200, "ignored"), doc
    assert _kinds(cluster) == []
    code, doc = cluster.call(holder, "POST", f"/admin/failpoints/{FAILPOINT}", {})
    assert code == 200, doc
    try:
        holder, body = _stale_request(cluster)
        code, doc = cluster.call(holder, "POST", "/internal/rebalance", body)
        assert (code, doc["state"]) == (200, "started"), doc
        cluster.wait_for(lambda: bool(_applied(cluster, holder, body["revision"])),
                         "the primary to act on the stale request")  # fmt: skip
        assert "stale-request-applied" in _kinds(cluster)
    finally:
        cluster.call(holder, "DELETE", f"/admin/failpoints/{FAILPOINT}")
