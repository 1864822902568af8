"""A rebalance that removes both the primary and the group's leader still finishes.

Found by the full-mix run (seed 11, partition 3): the primary's replica, once
removed from the group, hears from no leader again and keeps naming the old
one; the old leader, removed by the same change, steps down and answers as a
follower. A primary that trusted its replica's idea of the leader polled that
follower forever, and pending was never cleared.
"""

from __future__ import annotations

from checkers.assignments import check_assignments
from tests.node.cluster import ProcCluster
from tests.rebalance.flow import (
    NAMES,
    alter,
    assignments,
    audit,
    call_any,
    targets,
    wait_converged,
)

P = 0


def _primary(cluster: ProcCluster) -> str:
    found: list[str] = []

    def check() -> bool:
        lease = call_any(cluster, "GET", "/admin/placement")["leases"].get(str(P))
        found[:] = [lease["holder"]] if lease else []
        return bool(found)

    cluster.wait_for(check, f"a primary for partition {P}")
    return found[0]


def _move_leadership(cluster: ProcCluster, to: str, group: str) -> None:
    """Hand the group's leadership to `to`, and wait until every member knows it."""

    def moved() -> bool:
        leader = cluster.leader(group)
        if leader != to:
            if leader is not None:
                cluster.call(leader, "POST", "/admin/transfer-leader", {"group": group, "to": to})
            return False
        members = cluster.status(to)["groups"][group]["conf"]["peers"]
        return all(cluster.status(n)["groups"][group]["leader"] == to for n in members)

    cluster.wait_for(moved, f"{to} to lead {group}")


def test_rebalance_removing_primary_and_leader_finishes(cluster: ProcCluster) -> None:
    """Stable S = {primary, leader, x}; the zone's data nodes become
    {x} + the two outsiders: the change removes the primary and the leader,
    and the primary must find the new leader to see the change done."""
    stable = assignments(cluster)[P]["stable"]
    primary = _primary(cluster)
    leader = next(n for n in stable if n != primary)
    _move_leadership(cluster, leader, f"part-{P}")
    target = sorted(n for n in NAMES if n not in (primary, leader))
    alter(cluster, filter=target)
    # The filter acts once the driver writes the data nodes it admits.
    cluster.wait_for(lambda: targets(cluster)[P] == target, "the zone to target the outsiders")
    wait_converged(cluster)
    keys = assignments(cluster)[P]
    assert (keys["stable"], keys.get("pending")) == (target, None)
    applied = [ev for ev in cluster.events(primary)
               if ev["kind"] == "rebalance-request" and ev.get("direction") == "applied"
               and ev.get("partition") == P and ev.get("peers") == target]  # fmt: skip
    assert applied, f"the primary {primary} never finished the rebalance to {target}"
    anomalies, _ = check_assignments(audit(cluster))
    assert anomalies == [], anomalies[:3]
    alter(cluster, filter=["*"])
    cluster.wait_for(lambda: len(targets(cluster)[P]) == 3 and primary in
                     call_any(cluster, "GET", "/admin/zones/default")["data_nodes"],
                     "every node to be a data node again")  # fmt: skip
    wait_converged(cluster)
