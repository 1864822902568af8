"""The raft checker on real events of restarted nodes (issue 15's false positive).

A node killed between a round's fsync and its event write loses that round's
`config-committed`; on restart its hard state commits the entry silently. The
runtime's start-up `config-applied` carries the commit index it read back, so
the checker knows the configuration in force is committed when the restarted
node, later leader, starts the next change.
"""

from __future__ import annotations

from typing import Any

from checkers.api import CheckContext
from checkers.raft import RaftChecker
from ember.raft import Ready
from tests.checkers.raft_net import Audit, AuditNet


def _kinds(audit: Audit) -> set[str]:
    result = RaftChecker().check(CheckContext(audit=audit))
    return {a.kind for a in result.anomalies}


def _without_commit(audit: Audit) -> Audit:
    """The same log as the daemon wrote it before the `commit` field existed."""
    return {n: [{k: v for k, v in ev.items() if k != "commit"} for ev in evs]
            for n, evs in audit.items()}  # fmt: skip


def _restarted_leader_changes_again() -> tuple[AuditNet, int]:
    """n2 loses the round that committed C(new), restarts, leads and changes peers."""
    net = AuditNet(["n1", "n2", "n3"], seed=3)
    net.add("n4")
    net.elect("n1")
    net.tick(times=2)
    leader = net.nodes["n1"]
    leader.change_peers(["n1", "n2", "n4"], token=2)
    stable_index: list[int] = []

    def commits_stable(rd: Ready) -> bool:
        # The round in which n2 learns that the stable entry committed.
        done = [e for e in net.disks["n2"].entries if e.kind == "config" and e.conf
                and not e.conf.is_joint and e.index > 1]  # fmt: skip
        hs = rd.hard_state
        if done and hs is not None and hs.commit >= done[-1].index:
            stable_index.append(done[-1].index)
            return True
        return False

    net.lose_round("n2", commits_stable)
    net.tick(times=6)
    assert stable_index, "n2 never committed C(new)"
    assert not leader.status().conf.is_joint
    net.restart("n2")
    net.tick(times=2)
    leader.transfer_leader("n2")
    net.tick(times=3)
    assert net.nodes["n2"].role == "leader"
    net.nodes["n2"].change_peers(["n1", "n2", "n3"], token=3)
    net.tick(times=8)
    return net, stable_index[0]


def test_restarted_node_knows_its_configuration_committed_from_its_hard_state() -> None:
    """A restarted node's lost config-committed is no second uncommitted configuration."""
    net, stable = _restarted_leader_changes_again()
    audit = net.audit()
    lost = [ev for ev in net.lost["n2"] if ev["kind"] == "config-committed"]
    assert [ev["index"] for ev in lost] == [stable]  # the round that was lost
    restart = [ev for ev in audit["n2"] if ev["kind"] == "config-applied" and "commit" in ev
               and ev["index"] == stable]  # fmt: skip
    assert restart
    assert restart[-1]["commit"] >= stable
    appended = [
        ev for ev in audit["n2"] if ev["kind"] == "config-appended" and ev["index"] > stable
    ]
    assert appended, "the restarted leader started no change"
    assert _kinds(audit) == set()


def test_without_the_commit_index_the_restart_looks_like_two_uncommitted_configs() -> None:
    """The same real events minus `commit` reproduce the old false positive: the
    regression test above can fail."""
    net, _ = _restarted_leader_changes_again()
    assert _kinds(_without_commit(net.audit())) == {"two-uncommitted-configs"}


def test_snapshot_install_reports_the_commit_it_brings() -> None:
    """A follower that installs a snapshot learns the commit it carries."""
    net = AuditNet(["n1", "n2", "n3"], seed=5)
    net.elect("n1")
    net.partition(["n3"], ["n1", "n2"])
    for i in range(6):
        net.nodes["n1"].propose(b"x%d" % i)
        net.tick(times=1)
    net.drain_all()
    net.nodes["n1"].compact(net.nodes["n1"].log.committed, b"state")
    net.heal()
    net.tick(times=4)
    installed: list[dict[str, Any]] = net.kinds("n3", "snapshot-installed")
    assert installed
    assert installed[-1]["commit"] == installed[-1]["index"] > 0
