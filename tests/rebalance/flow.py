"""Helpers for the rebalance tests on real processes: a 5-node cluster with the
metastore on n1-n3, and polling for convergence."""

from __future__ import annotations

from typing import Any

from ember.zones import assign
from tests.node.cluster import ProcCluster

NAMES = ["n1", "n2", "n3", "n4", "n5"]
PARTITIONS = 2  # the zone's at first; the nodes host one more group for the partition test
# Ticks of 20 ms, elections after 25 of them: fast, yet steady on a shared CI box.
FLAGS = ["--tick-ms", "20", "--election-timeout-ticks", "25", "--meta-nodes", "auto",
         "--partitions", str(PARTITIONS + 1), "--catchup-max-retries", "30"]  # fmt: skip


def live(cluster: ProcCluster) -> list[str]:
    """The nodes this cluster is running now."""
    return [n for n in cluster.names if n in cluster.procs]


def call_any(cluster: ProcCluster, method: str, path: str, body: Any = None) -> Any:
    """The first 200 answer from a live node, else AssertionError."""
    last: Any = None
    for node in live(cluster):
        try:
            code, doc = cluster.call(node, method, path, body)
        except OSError as err:
            last = err
            continue
        if code == 200:
            return doc
        last = (code, doc)
    raise AssertionError(f"{method} {path}: no node answered 200: {last}")


def assignments(cluster: ProcCluster) -> dict[int, dict[str, Any]]:
    """Per partition, {kind: value} of its assignment keys."""
    out: dict[int, dict[str, Any]] = {}
    for a in call_any(cluster, "GET", "/admin/assignments")["assignments"]:
        out.setdefault(a["partition"], {})[a["kind"]] = a["value"]
    return out


def targets(cluster: ProcCluster) -> dict[int, list[str]]:
    """What the zone's rendezvous assignment says each partition should be."""
    doc = call_any(cluster, "GET", "/admin/zones/default")
    zone, nodes = doc["zone"], doc["data_nodes"] or []
    return {p: assign("default", p, nodes, zone["replicas"]) for p in range(zone["partitions"])}


def group_peers(cluster: ProcCluster, p: int) -> list[str] | None:
    """The voters of part-p on its leader, if the leader is settled (no change)."""
    for node in live(cluster):
        # A node whose replica step 5 stopped does not list the group.
        st = cluster.status(node)["groups"].get(f"part-{p}")
        if st is not None and st["role"] == "leader":
            idle = st["stage"] == "none" and not st["conf"]["joint"]
            return sorted(st["conf"]["peers"]) if idle else None
    return None


def is_converged(cluster: ProcCluster, expected: dict[int, list[str]] | None = None) -> bool:
    """pending, planned and cancel empty; stable = expected (default: the targets);
    each group's voters = stable."""
    try:
        want = targets(cluster) if expected is None else expected
        keys = assignments(cluster)
        for p, peers in want.items():
            kinds = keys.get(p, {})
            if any(kinds.get(k) for k in ("pending", "planned", "cancel")):
                return False
            if kinds.get("stable") != peers or group_peers(cluster, p) != peers:
                return False
        return True
    except (AssertionError, OSError, KeyError):
        return False


def wait_converged(cluster: ProcCluster, expected: dict[int, list[str]] | None = None) -> None:
    """Wait until `is_converged`, else fail naming the last state seen."""
    try:
        cluster.wait_for(lambda: is_converged(cluster, expected), "rebalance to converge")
    except AssertionError as err:
        drivers = {}
        for node in live(cluster):
            code, doc = cluster.call(node, "GET", "/admin/placement")
            drivers[node] = doc.get("this_node") if code == 200 else (code, doc)
        raise AssertionError(
            f"{err}; assignments {assignments(cluster)}; drivers {drivers}"
        ) from None


def alter(cluster: ProcCluster, **changes: Any) -> dict[str, Any]:
    """POST /admin/zones/default with `changes`."""
    doc: dict[str, Any] = call_any(cluster, "POST", "/admin/zones/default", changes)
    return doc


def failpoint_all(cluster: ProcCluster, name: str, params: dict[str, Any] | None) -> None:
    """Switch a failpoint on (params) or off (None) on every live node."""
    for node in live(cluster):
        if params is None:
            cluster.call(node, "DELETE", f"/admin/failpoints/{name}")
        else:
            code, doc = cluster.call(node, "POST", f"/admin/failpoints/{name}", params)
            assert code == 200, doc


def audit(cluster: ProcCluster) -> dict[str, list[dict[str, Any]]]:
    """Every node's audit events."""
    return {n: cluster.events(n) for n in cluster.names if cluster.data_dir(n).exists()}
