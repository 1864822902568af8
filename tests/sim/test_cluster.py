"""The simulated cluster: crash, restart, pause and partitions on real Raft nodes."""

from __future__ import annotations

import random
from typing import Any

from ember.raft import RaftConfig
from ember.sim.clock import NS_PER_MS, NS_PER_S, VirtualClock
from ember.sim.cluster import Cluster, Observer, SimNode
from ember.sim.network import Network
from ember.sim.trace import Trace


def _cluster(voters: int = 3) -> Cluster:
    ids = [f"n{i}" for i in range(1, voters + 1)]
    clock = VirtualClock()
    cluster = Cluster(
        voters=ids,
        spares=[],
        config=RaftConfig(),
        clock=clock,
        network=Network(random.Random(1)),
        clock_rng=random.Random(2),
        node_rngs={n: random.Random(i) for i, n in enumerate(ids)},
        trace=Trace(),
        observer=Observer(),
    )
    for n in ids:
        cluster.start(n)
    return cluster


def _run_for(cluster: Cluster, seconds: float) -> None:
    until = cluster.clock.now_ns + int(seconds * NS_PER_S)
    while (event := cluster.clock.pop(until)) is not None:
        cluster.handle(event.kind, event.payload)


def _leader(cluster: Cluster) -> SimNode:
    _run_for(cluster, 0.0)
    for _ in range(50):
        leaders = cluster.leaders()
        if leaders:
            return leaders[0]
        _run_for(cluster, 0.1)
    raise AssertionError("no leader elected within 5 simulated seconds")


def _propose(cluster: Cluster, node: SimNode, data: bytes) -> list[Any]:
    """Submit a proposal; the list gets its index (or error) once the node is free."""
    out: list[Any] = []
    cluster.call(node.id, lambda raw: raw.propose(data), out.append)
    return out


def test_a_leader_is_elected_and_entries_replicate_to_all() -> None:
    """Three nodes elect a leader and apply a proposal everywhere."""
    cluster = _cluster()
    leader = _leader(cluster)
    out = _propose(cluster, leader, b"k=v")
    _run_for(cluster, 0.5)
    assert len(out) == 1
    assert isinstance(out[0], int)
    for node in cluster.nodes.values():
        assert node.sm.applied >= out[0]
        assert node.sm.values("k") == ["v"]


def test_crash_between_write_and_fsync_loses_the_unpersisted_entries() -> None:
    """A crash during the fsync window drops that write; the restart never sees it."""
    cluster = _cluster()
    leader = _leader(cluster)
    _run_for(cluster, 0.3)
    durable_last = leader.durable.last_index
    _propose(cluster, leader, b"k=lost")
    # The proposal is written (or queued behind a write) but not yet fsync'd.
    assert leader.written.last_index > durable_last or leader.backlog
    cluster.crash(leader.id)
    assert leader.durable.last_index == durable_last
    assert leader.written.last_index == durable_last
    cluster.start(leader.id)
    assert leader.raw is not None
    assert leader.raw.status().last_index == durable_last


def test_restart_recovers_durable_state_and_rejoins() -> None:
    """A restarted node rebuilds from its durable log and catches up."""
    cluster = _cluster()
    leader = _leader(cluster)
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    for i in range(5):
        _propose(cluster, leader, f"k={i}".encode())
        _run_for(cluster, 0.05)
    _run_for(cluster, 0.3)
    cluster.crash(follower.id)
    assert follower.raw is None
    term_before = follower.durable.hard_state.term
    leader = _leader(cluster)
    _propose(cluster, leader, b"k=after")
    _run_for(cluster, 0.3)
    cluster.start(follower.id)
    _run_for(cluster, 1.0)
    assert follower.durable.hard_state.term >= term_before
    assert follower.sm.values("k") == [*map(str, range(5)), "after"]


def test_paused_node_buffers_messages_and_catches_up_on_resume() -> None:
    """A paused follower applies nothing until resumed, then catches up."""
    cluster = _cluster()
    leader = _leader(cluster)
    follower = next(n for n in cluster.nodes.values() if n is not leader)
    cluster.pause(follower.id)
    applied = follower.sm.applied
    _propose(cluster, leader, b"k=while-paused")
    _run_for(cluster, 0.5)
    assert follower.sm.applied == applied
    cluster.resume(follower.id)
    _run_for(cluster, 0.5)
    assert follower.sm.values("k") == ["while-paused"]


def test_isolating_the_leader_elects_another_on_the_majority_side() -> None:
    """A partition that isolates the leader leads to a new leader in a higher term."""
    cluster = _cluster()
    old = _leader(cluster)
    assert old.status is not None
    old_term = old.status.term
    others = [n for n in cluster.nodes if n != old.id]
    cluster.network.partition([[old.id], others])
    _run_for(cluster, 2.0)
    new = [n for n in cluster.leaders() if n.id != old.id]
    assert new
    assert new[0].status is not None
    assert new[0].status.term > old_term


def test_one_way_partition_lets_messages_through_in_one_direction_only() -> None:
    """With the leader unable to reach one follower, that follower stops applying."""
    cluster = _cluster()
    leader = _leader(cluster)
    deaf = next(n for n in cluster.nodes.values() if n is not leader)
    cluster.network.block(leader.id, deaf.id)
    applied = deaf.sm.applied
    _propose(cluster, leader, b"k=x")
    _run_for(cluster, 0.05 + 5 * NS_PER_MS / NS_PER_S)
    assert deaf.sm.applied == applied
    assert cluster.network.stats.blocked > 0
