"""POST /admin/report-applied: each group's end state in the audit log, on request."""

from __future__ import annotations

import time

from tests.node.conftest import MakeCluster

GROUP = "part-0"
WRITES = 7  # not a multiple of the periodic report's 50: only the request reports there


def test_every_replica_reports_where_it_is_when_asked(make_cluster: MakeCluster) -> None:
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader(GROUP)
    for i in range(WRITES):
        code, doc = cluster.call(leader, "PUT", f"/kv/k{i}", {"value": i})
        assert code == 200, doc
    commit = cluster.status(leader)["groups"][GROUP]["commit"]

    def applied_everywhere() -> bool:
        return all(cluster.status(n)["groups"][GROUP]["applied"] == commit for n in cluster.names)

    cluster.wait_for(applied_everywhere, "every replica to apply the writes")
    time.sleep(0.3)  # idle_s must count the time since the last apply
    reports = []
    for n in cluster.names:
        code, doc = cluster.call(n, "POST", "/admin/report-applied", {})
        assert (code, doc["reported"][GROUP]) == (200, commit), doc
        ev = [e for e in cluster.events(n) if e["kind"] == "applied" and e.get("group") == GROUP]
        reports.append(ev[-1])
    assert {(r["index"], r["reason"]) for r in reports} == {(commit, "collect")}
    assert len({(r["digest"], r["state"]) for r in reports}) == 1, reports
    assert all(0.3 <= r["idle_s"] < 30 for r in reports), reports


def test_a_divergence_after_the_last_periodic_report_shows_only_in_the_requested_one(
    make_cluster: MakeCluster,
) -> None:
    """A follower whose state diverges below index 50 has made no periodic report
    at all: the reports taken on request are the only evidence, and they show it."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader(GROUP)
    follower = next(n for n in cluster.names if n != leader)
    code, doc = cluster.call(follower, "POST", "/admin/failpoints/kv.apply-diverge", {})
    assert code == 200, doc
    code, doc = cluster.call(leader, "PUT", "/kv/k", {"value": 1})
    assert code == 200, doc
    commit = cluster.status(leader)["groups"][GROUP]["commit"]

    def applied_everywhere() -> bool:
        return all(cluster.status(n)["groups"][GROUP]["applied"] == commit for n in cluster.names)

    cluster.wait_for(applied_everywhere, "every replica to apply the put")
    reports = {}
    for n in cluster.names:
        assert cluster.call(n, "POST", "/admin/report-applied", {})[0] == 200
        ev = [e for e in cluster.events(n) if e["kind"] == "applied" and e.get("group") == GROUP]
        assert [e.get("reason") for e in ev] == ["collect"], ev  # nothing periodic below 50
        reports[n] = ev[0]
    assert {r["index"] for r in reports.values()} == {commit}
    assert len({r["digest"] for r in reports.values()}) == 1  # the same log everywhere
    states = {n: r["state"] for n, r in reports.items()}
    assert sum(s != states[leader] for s in states.values()) == 1, states  # the follower's
