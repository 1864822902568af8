"""The planted defect `raft.skip-catchup` on a live cluster: with it a leader
enters the joint stage at once, before the new peer caught up, and the raft
checker says so from the nodes' audit events; without it the same change
catches the peer up first and the checker is clean."""

from __future__ import annotations

from checkers.api import CheckContext
from checkers.raft import RaftChecker
from tests.node.conftest import MakeCluster

GROUP = "part-0"
NAMES = ["n1", "n2", "n3", "n4"]
ONE_GROUP = ["--partitions", "1", "--election-timeout-ticks", "50"]


def _add_n4(make_cluster: MakeCluster, planted: bool) -> list[str]:
    """Adds n4 to part-0 (n4 down when planted: it cannot catch up); returns
    the raft checker's anomaly kinds."""
    cluster = make_cluster(NAMES, bootstrap=NAMES[:3], extra=ONE_GROUP)
    cluster.start_all(NAMES if not planted else NAMES[:3])
    leader = cluster.wait_leader(GROUP, among=NAMES[:3])
    if planted:
        code, doc = cluster.call(leader, "POST", "/admin/failpoints/raft.skip-catchup", {})
        assert code == 200, doc
    body = {"group": GROUP, "peers": NAMES, "token": 1}
    code, doc = cluster.call(leader, "POST", "/admin/change-peers", body)
    # With n1..n3 up, both majorities of joint(n1..n4, n1..n3) hold: it completes.
    assert code == 200, doc
    audit = {n: cluster.events(n) for n in cluster.procs}
    result = RaftChecker().check(CheckContext(audit=audit))
    assert result.valid is (not planted), result
    return [a.kind for a in result.anomalies]


def test_skip_catchup_failpoint_is_caught_by_the_raft_checker(make_cluster: MakeCluster) -> None:
    assert "joint-before-catchup" in _add_n4(make_cluster, planted=True)


def test_the_same_change_without_the_failpoint_is_clean(make_cluster: MakeCluster) -> None:
    assert _add_n4(make_cluster, planted=False) == []
