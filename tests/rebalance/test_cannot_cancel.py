"""'cannot cancel' on a real 5-node cluster: the placement driver finishes it.

Seed 004: a cancel reaching a group that already committed the change's new
peers cannot be executed; the placement driver, hearing that outcome in the
primary's answer, logs it and runs the usual rebalance-done invoke.
"""

from __future__ import annotations

from typing import Any

from checkers.assignments import check_assignments
from ember.rebalance.invokes import cancel_invoke
from tests.node.cluster import ProcCluster
from tests.rebalance.flow import assignments, audit, call_any, is_converged, wait_converged

P = 0
PENDING = f"zone.default.p{P}.assignments.pending"


def _driver_events(cluster: ProcCluster, pending_revision: int) -> list[dict[str, Any]]:
    return [ev for evs in audit(cluster).values() for ev in evs
            if ev["kind"] == "cancel-request" and ev.get("direction") == "cannot-cancel"
            and ev.get("pending_revision") == pending_revision]  # fmt: skip


def _stage_cancel_of_a_finished_change(cluster: ProcCluster, at: list[str], old: list[str]) -> int:
    """pending = the peers the group is already at, then a cancel naming that
    pending write: a change whose new configuration is committed, cancelled.

    The primary may finish the repeat first (its done invoke removes pending and
    the cancel then fails its guard, or removes the cancel with it); then the
    pair is written again. Returns the pending revision a cancel named."""
    for _ in range(20):
        rev = call_any(cluster, "POST", "/meta/put", {"key": PENDING, "value": at})["revision"]
        spec = cancel_invoke("default", P, old, at, rev)
        if call_any(cluster, "POST", "/meta/invoke", spec)["succeeded"]:
            cluster.wait_for(lambda: not assignments(cluster)[P].get("cancel"),
                             "the cancel to be finished")  # fmt: skip
            if _driver_events(cluster, rev):
                return int(rev)
        cluster.wait_for(lambda: is_converged(cluster), "the repeat to finish")
    raise AssertionError("the primary finished every staged pending before its cancel landed")


def test_cannot_cancel_is_logged_and_finished_by_the_driver(cluster: ProcCluster) -> None:
    """The group is at `at`; a cancel of the change old -> at is answered
    'cannot-cancel' by the group, and the driver (not the primary) writes the
    done invoke: stable = at, pending and cancel removed."""
    at = assignments(cluster)[P]["stable"]
    old = sorted([*at[:-1], next(n for n in cluster.names if n not in at)])
    rev = _stage_cancel_of_a_finished_change(cluster, at, old)
    events = _driver_events(cluster, rev)
    assert events[0]["done"] is True, events
    assert (events[0]["peers"], events[0]["old"]) == (at, old)
    # The driver is the one that logged it: the node then holding the driver lease.
    drivers = {ev["node"] for ev in events}
    actives = {n for n, evs in audit(cluster).items() for ev in evs
               if ev["kind"] == "placement-driver" and ev.get("active")}  # fmt: skip
    assert drivers <= actives
    applied = [ev for evs in audit(cluster).values() for ev in evs
               if ev["kind"] == "cancel-request" and ev.get("direction") == "applied"
               and ev.get("outcome") == "cannot-cancel"]  # fmt: skip
    assert applied, "the primary reported no cannot-cancel outcome"
    wait_converged(cluster)
    keys = assignments(cluster)[P]
    assert (keys["stable"], keys.get("pending"), keys.get("cancel")) == (at, None, None)


def test_the_module_passes_the_rebalance_checker(cluster: ProcCluster) -> None:
    """Finishing a cannot-cancel as done breaks no rebalance invariant."""
    anomalies, _ = check_assignments(audit(cluster))
    assert anomalies == [], anomalies[:3]
