"""ember.raft.facade.change_target: the public view of a change's target that the
rebalance cancel table uses (instead of the core's private change context)."""

from __future__ import annotations

from ember.raft import RaftConfig
from ember.raft.facade import change_target
from tests.raft.driver import Net

V3 = ["n1", "n2", "n3"]
V4 = ["n1", "n2", "n3", "n4"]


def test_change_target_names_the_change_in_flight_and_none_after() -> None:
    """While n4 is catching up the leader reports the target C(n1..n4); followers
    report none (only a leader drives a change); once done, none again."""
    net = Net([*V3], config=RaftConfig())
    net.add("n4")
    net.elect("n1")
    net.tick(times=2)
    leader = net.nodes["n1"]
    assert change_target(leader) is None
    net.down.add("n4")  # hold the change in catching-up
    ticket = leader.change_peers(V4, token=1)
    net.deliver()
    assert leader.status().stage == "catching-up"
    target = change_target(leader)
    assert target is not None
    assert list(target.peers) == V4
    assert change_target(net.nodes["n2"]) is None
    net.down.discard("n4")
    net.tick(times=3)
    assert ticket.done
    assert change_target(leader) is None
    assert leader.status().stage == "none"
