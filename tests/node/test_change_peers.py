"""change-peers on real processes: replacement far behind (by appends and by
snapshot), a disjoint move, the asynchronous status, and concurrent changes."""

from __future__ import annotations

import asyncio
import random
import signal

from checkers.api import CheckContext
from checkers.convergence import ConvergenceChecker
from checkers.raft import RaftChecker
from ember.client import EmberClient
from tests.node.cluster import ProcCluster, fill
from tests.node.conftest import MakeCluster

BEHIND = 5000
GROUP = "part-0"
# One partition, and a longer election timeout: a catch-up wait lasts one
# election timeout, and on a shared 2-core machine 4 x 200 ms can be too
# short for several thousand entries (the change would end in ECATCHUP).
ONE_GROUP = ["--partitions", "1", "--election-timeout-ticks", "50"]


def _change(cluster: ProcCluster, leader: str, peers: list[str], token: int) -> dict[str, object]:
    code, doc = cluster.call(
        leader, "POST", "/admin/change-peers", {"group": GROUP, "peers": peers, "token": token}
    )
    assert code == 200, doc
    assert isinstance(doc, dict)
    return doc


def _read_sample(cluster: ProcCluster, node: str, keys: list[int]) -> list[str]:
    async def run() -> list[str]:
        bad = []
        async with EmberClient([cluster.url(node)], timeout_s=10.0, partitions=1) as c:
            for i in keys:
                out = await c.get(f"f{i}")
                if out.type != "ok" or out.value != i:
                    bad.append(f"f{i}: {out}")
        return bad

    return asyncio.run(run())


def _replace_far_behind(
    make_cluster: MakeCluster, extra: list[str], slow_install_ms: float = 0
) -> ProcCluster:
    """n4 (empty) replaces a follower of a group BEHIND entries long; n4 then
    leads and serves reads of the old entries from its own state."""
    cluster = make_cluster(
        ["n1", "n2", "n3", "n4"],
        bootstrap=["n1", "n2", "n3"],
        extra=[*ONE_GROUP, *extra],
    )
    cluster.start_all(["n1", "n2", "n3"])
    leader = cluster.wait_leader(GROUP)
    assert asyncio.run(fill(cluster.urls(["n1", "n2", "n3"]), BEHIND, partitions=1)) == BEHIND
    cluster.start("n4")
    if slow_install_ms:
        body = {"delay_ms": slow_install_ms}
        code, _ = cluster.call("n4", "POST", "/admin/failpoints/snapshot.install.slow", body)
        assert code == 200
    dropped = next(n for n in ("n1", "n2", "n3") if n != leader)
    new = sorted({"n1", "n2", "n3", "n4"} - {dropped})
    doc = _change(cluster, leader, new, token=1)
    assert doc["ok"] is True, doc
    start = next(
        e for e in cluster.events(leader) if e["kind"] == "catchup-start" and e["peer"] == "n4"
    )
    assert start["leader_last"] - start["match"] >= BEHIND
    st = cluster.status(leader)["groups"][GROUP]
    assert st["conf"]["peers"] == new
    assert st["conf"]["joint"] is False
    code, _ = cluster.call(leader, "POST", "/admin/transfer-leader", {"group": GROUP, "to": "n4"})
    assert code == 200
    assert cluster.wait_leader(GROUP, among=["n4"]) == "n4"
    sample = random.Random(0).sample(range(BEHIND), 200)
    assert _read_sample(cluster, "n4", sample) == []
    return cluster


def _assert_audit_valid(cluster: ProcCluster) -> None:
    """Stop every node cleanly, then run the Raft and convergence checkers on
    the nodes' own audit logs."""
    leader = cluster.wait_leader(GROUP)

    def quiet() -> bool:
        # Every voter applied all the leader committed: the end states compare.
        st = cluster.status(leader)["groups"][GROUP]
        return all(
            cluster.status(v)["groups"][GROUP]["applied"] == st["commit"]
            for v in st["conf"]["peers"]
        )

    cluster.wait_for(quiet, "the voters to apply everything committed")
    for name in list(cluster.procs):
        cluster.kill(name, signal.SIGTERM)
    ctx = CheckContext(audit={n: cluster.events(n) for n in cluster.names})
    for checker in (RaftChecker(), ConvergenceChecker()):
        result = checker.check(ctx)
        assert result.valid is True, (checker.name, result)


def test_replace_node_5000_entries_behind(make_cluster: MakeCluster) -> None:
    """A new node 5,000 entries behind catches up by appends and replaces a
    follower; the nodes' audit logs pass the Raft and convergence checkers."""
    cluster = _replace_far_behind(make_cluster, ["--compact-every", "0"])
    _assert_audit_valid(cluster)
    installed = [e for e in cluster.events("n4") if e["kind"] == "snapshot-installed"]
    # Only the bootstrap configuration (the empty snapshot at index 0) may come that way.
    assert all(e["index"] == 0 for e in installed)


def test_replace_node_behind_a_compacted_log_catches_up_by_snapshot(
    make_cluster: MakeCluster,
) -> None:
    """With the log compacted past what n4 needs, catch-up goes through a
    snapshot, even with the snapshot install slowed by a failpoint."""
    cluster = _replace_far_behind(make_cluster, ["--compact-every", "500"], slow_install_ms=300)
    installed = [e for e in cluster.events("n4") if e["kind"] == "snapshot-installed"]
    assert [e for e in installed if e["index"] >= 1000], installed
    # The snapshot went through the slow-install failpoint on its way in.
    code, fps = cluster.call("n4", "GET", "/admin/failpoints")
    assert code == 200
    assert fps["snapshot.install.slow"]["params"]["hits"] >= 1
    _assert_audit_valid(cluster)


def test_disjoint_move_three_to_three(make_cluster: MakeCluster) -> None:
    """A group moves from n1-n3 to n4-n6 and keeps serving after n1-n3 are gone."""
    names = [f"n{i}" for i in range(1, 7)]
    cluster = make_cluster(names, bootstrap=names[:3], extra=ONE_GROUP)
    cluster.start_all(names[:3])
    leader = cluster.wait_leader(GROUP)
    assert asyncio.run(fill(cluster.urls(names[:3]), 300, partitions=1)) == 300
    cluster.start_all(names[3:])
    doc = _change(cluster, leader, names[3:], token=1)
    assert doc["ok"] is True, doc
    for old in names[:3]:
        cluster.kill(old)
    new_leader = cluster.wait_leader(GROUP, names[3:])
    assert cluster.status(new_leader)["groups"][GROUP]["conf"]["peers"] == names[3:]
    assert _read_sample(cluster, new_leader, list(range(0, 300, 7))) == []

    async def write() -> str:
        async with EmberClient(cluster.urls(names[3:]), partitions=1) as c:
            return (await c.put("after-move", 1)).type

    assert asyncio.run(write()) == "ok"
    _assert_audit_valid(cluster)


def test_async_change_reports_its_status(make_cluster: MakeCluster) -> None:
    """submit returns an id at once; the status endpoint shows it done with its result."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=ONE_GROUP)
    cluster.start_all()
    leader = cluster.wait_leader(GROUP)
    others = [n for n in cluster.names if n != leader]
    body = {"group": GROUP, "peers": [leader, others[0]], "learners": [others[1]], "token": 5}
    code, doc = cluster.call(leader, "POST", "/admin/change-peers/submit", body)
    assert code == 202, doc
    change_id = doc["id"]

    def done() -> bool:
        return cluster.call(leader, "GET", f"/admin/changes/{change_id}")[1]["state"] == "done"

    cluster.wait_for(done, f"change {change_id} to finish")
    record = cluster.call(leader, "GET", f"/admin/changes/{change_id}")[1]
    assert record["result"]["ok"] is True, record
    assert record["result"]["token"] == 5
    st = cluster.status(leader)["groups"][GROUP]
    assert st["conf"]["learners"] == [others[1]]
    assert st["token"] == 5
    assert cluster.call(leader, "GET", "/admin/changes/nope")[0] == 404


def test_concurrent_change_is_refused(make_cluster: MakeCluster) -> None:
    """While one change waits in catch-up, a second one gets 409 change-busy."""
    cluster = make_cluster(["n1", "n2", "n3", "n4"], bootstrap=["n1", "n2", "n3"], extra=ONE_GROUP)
    cluster.start_all()
    leader = cluster.wait_leader(GROUP)
    # Hold n4 back so the first change stays in catch-up.
    code, _ = cluster.call(leader, "POST", "/admin/failpoints/raft.message.drop", {"peer": "n4"})
    assert code == 200
    first = {"group": GROUP, "peers": ["n1", "n2", "n3", "n4"], "token": 1}
    code, doc = cluster.call(leader, "POST", "/admin/change-peers/submit", first)
    assert code == 202, doc
    second = {"group": GROUP, "peers": ["n1", "n2", "n3"], "learners": ["n4"], "token": 2}
    code, busy = cluster.call(leader, "POST", "/admin/change-peers", second)
    assert code == 409, busy
    assert busy["error"] == "change-busy"
    assert busy["settling"] is False
    assert cluster.call(leader, "DELETE", "/admin/failpoints/raft.message.drop")[0] == 200
    cluster.wait_for(
        lambda: cluster.call(leader, "GET", f"/admin/changes/{doc['id']}")[1]["state"] == "done",
        "the first change to end",
    )
    # Once it has ended (done or ECATCHUP), the group takes a new change.
    assert _change(cluster, leader, ["n1", "n2", "n3", "n4"], token=3)["ok"] is True
    toggles = [e for e in cluster.events(leader) if e["kind"] == "failpoint"]
    assert [e["enabled"] for e in toggles] == [True, False]
