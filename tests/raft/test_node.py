"""RawNode: elections, the leader lease, commit rules, snapshots, flow control."""

import random

import pytest

from ember.raft import (
    AppendEntries,
    AppendEntriesResp,
    ConfState,
    Entry,
    HardState,
    InvalidConfig,
    Message,
    NotLeader,
    PersistedState,
    RaftConfig,
    RawNode,
    RequestVote,
)
from ember.raft._follower import conf_at

from .driver import Net


def test_a_leader_is_elected_and_appends_a_noop():
    """The first election makes one leader whose first entry is a no-op of its term."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.deliver()
    leader = net.leader()
    assert leader is not None
    assert leader.id == "n1"
    assert leader.log.entry(1).kind == "noop"
    assert leader.log.entry(1).term == leader.term
    assert all(n.leader == "n1" for n in net.nodes.values())


def test_entries_replicate_commit_and_apply_everywhere():
    """Proposals reach every node's disk and state machine in order."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    for i in range(5):
        net.nodes["n1"].propose(b"v%d" % i)
    net.tick(times=3)
    for disk in net.disks.values():
        assert [e.data for e in disk.applied if e.kind == "normal"] == [
            b"v%d" % i for i in range(5)
        ]


def test_followers_refuse_proposals():
    """propose on a follower raises NotLeader naming the leader."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    with pytest.raises(NotLeader) as err:
        net.nodes["n2"].propose(b"x")
    assert err.value.leader == "n1"


def test_election_timeouts_come_from_the_injected_rng():
    """Two nodes with equal seeds time out identically; the range is [T, 2T)."""
    cfg = RaftConfig(election_timeout_ticks=10)
    conf = ConfState(peers=("a", "b", "c"))
    timeouts = set()
    for seed in range(40):
        a = RawNode("a", "g", cfg, random.Random(seed), conf=conf)
        b = RawNode("a", "g", cfg, random.Random(seed), conf=conf)
        assert a._timeout == b._timeout
        timeouts.add(a._timeout)
    assert min(timeouts) >= 10
    assert max(timeouts) < 20
    assert len(timeouts) > 3


def test_voters_ignore_request_vote_within_the_leader_lease():
    """A follower that hears the leader ignores a higher-term RequestVote (without
    Pre-Vote, which would keep n3 from ever asking for a real vote here)."""
    net = Net(["n1", "n2", "n3"], config=RaftConfig(election_timeout_ticks=10, pre_vote=False))
    net.elect("n1")
    net.partition(["n3"], ["n1"])
    net.tick(times=25)
    assert net.nodes["n3"].term > 1
    assert net.nodes["n1"].role == "leader"
    assert net.nodes["n1"].term == 1
    assert net.nodes["n2"].term == 1
    ignored = net.kinds("n2", "vote-ignored")
    assert ignored
    assert ignored[0]["reason"] == "leader-lease"
    assert ignored[0]["candidate"] == "n3"


def test_timeout_now_election_is_not_ignored_by_the_lease():
    """A forced RequestVote (TimeoutNow) is granted even inside the lease."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=2)
    net.nodes["n1"].transfer_leader("n2")
    net.deliver()
    assert net.nodes["n2"].role == "leader"
    assert net.nodes["n2"].term == 2
    assert net.kinds("n2", "timeout-now-received")
    assert [e["reason"] for e in net.kinds("n1", "step-down")] == ["transfer"]


def test_request_vote_outside_the_lease_is_granted():
    """Without a recent leader, a higher-term RequestVote makes a node vote."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    n2 = net.nodes["n2"]
    for _ in range(10):
        n2._election_elapsed += 1  # n2 has not heard from n1 for a full timeout
    n2.step(RequestVote(group="g", src="n3", dst="n2", term=5, last_index=9, last_term=1))
    assert n2.term == 5
    assert n2.vote == "n3"


def test_a_refused_candidate_does_not_reset_the_voters_election_timer():
    """Raft 5.2: only a leader's message or a granted vote resets the timer. A voter
    that takes a stale candidate's higher term and refuses it keeps counting, so
    the voter with the longer log campaigns in time (sim seed 10: a stale candidate
    asking every timeout kept a two-voter group leaderless for 2.6 s)."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    n2 = net.nodes["n2"]
    n2._election_elapsed = 12  # no word from n1 for longer than the lease
    n2.step(RequestVote(group="g", src="n3", dst="n2", term=5, last_index=0, last_term=0))
    assert (n2.term, n2.vote, n2._election_elapsed) == (5, None, 12)
    n2.step(RequestVote(group="g", src="n1", dst="n2", term=6, last_index=9, last_term=1))
    assert (n2.term, n2.vote, n2._election_elapsed) == (6, "n1", 0)


def test_leader_steps_down_without_a_quorum():
    """A leader cut off from every follower steps down after an election timeout."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.partition(["n1"], ["n2", "n3"])
    net.tick("n1", times=25)
    assert net.nodes["n1"].role == "follower"
    assert [e["reason"] for e in net.kinds("n1", "step-down")] == ["lost-quorum"]


def fig8_node(node_id: str, terms: list[int], term: int, bugs: frozenset[str]) -> RawNode:
    entries = [Entry(term=t, index=i + 1) for i, t in enumerate(terms)]
    persisted = PersistedState(
        hard_state=HardState(term=term, commit=1), snapshot=None, entries=entries
    )
    cfg = RaftConfig(max_entries_per_append=1, planted_bugs=bugs)
    return RawNode(
        node_id,
        "g",
        cfg,
        random.Random(node_id),
        persisted=persisted,
        conf=ConfState(peers=("n1", "n2", "n3")),
    )


@pytest.mark.parametrize(
    ("bugs", "expected_commit"), [(frozenset(), 1), (frozenset({"commit-previous-term"}), 2)]
)
def test_leader_commits_only_current_term_entries_by_counting(bugs, expected_commit):
    """Figure 8: an old-term entry on a majority is not committed until a current-term one is."""
    net = Net(["n1", "n2", "n3"])
    net.nodes = {
        "n1": fig8_node("n1", [1, 1], 2, bugs),
        "n2": fig8_node("n2", [1, 2], 2, bugs),
        "n3": fig8_node("n3", [1], 2, bugs),
    }

    # Entries of the new leader's term are lost whenever they would be
    # accepted, so only index 2 (term 1) spreads to n3.
    def drop(m):
        if not isinstance(m, AppendEntries) or not any(e.term == 3 for e in m.entries):
            return False
        return net.nodes[m.dst].log.last_index >= m.prev_index

    net.drop = drop
    net.partition(["n1"], ["n2"])
    net.nodes["n1"].tick()  # n1 votes for itself...
    net.elect("n1")  # ...and wins with n3's vote at term 3
    net.tick("n1", times=3)
    leader = net.nodes["n1"]
    assert leader.role == "leader"
    assert leader.term == 3
    assert leader.progress("n3").match == 2
    assert leader.log.committed == expected_commit


def test_flow_control_caps_inflight_appends():
    """With acks lost, the leader sends at most max_inflight_appends appends per follower."""
    cfg = RaftConfig(max_inflight_appends=3, max_entries_per_append=1)
    net = Net(["n1", "n2", "n3"], config=cfg)
    net.elect("n1")
    net.tick(times=2)
    sent: list[AppendEntries] = []

    def drop(m):
        if isinstance(m, AppendEntries) and m.dst == "n2" and m.entries:
            sent.append(m)
        return m.src == "n2"  # n2's answers are all lost

    net.drop = drop
    for i in range(10):
        net.nodes["n1"].propose(b"%d" % i)
    net.deliver()
    assert len(sent) == 3
    assert net.nodes["n1"].progress("n2").is_paused()


def test_lagging_follower_gets_a_snapshot_when_entries_are_compacted():
    """A follower that needs compacted entries is sent the snapshot and installs it."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.down.add("n3")
    for i in range(20):
        net.nodes["n1"].propose(b"%d" % i)
    net.tick(times=2)
    leader = net.nodes["n1"]
    leader.compact(15, b"state-at-15")
    net.down.discard("n3")
    net.tick(times=3)
    sent = net.kinds("n1", "snapshot-sent")
    assert sent
    assert sent[0]["peer"] == "n3"
    assert sent[0]["index"] == 15
    assert net.kinds("n3", "snapshot-installed")[0]["index"] == 15
    assert net.disks["n3"].snapshot is not None
    assert net.disks["n3"].snapshot.data == b"state-at-15"
    assert net.nodes["n3"].log.committed == leader.log.committed == 21


def test_restart_rebuilds_state_from_disk():
    """A node restarted from its persisted state keeps term, log and configuration."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.nodes["n1"].propose(b"x")
    net.tick(times=2)
    net.restart("n2")
    n2 = net.nodes["n2"]
    assert n2.term == 1
    assert n2.log.last_index == 2
    assert n2.conf.peers == ("n1", "n2", "n3")
    net.tick(times=2)
    assert [e.data for e in net.disks["n2"].applied if e.kind == "normal"] == [b"x"]


def test_messages_for_another_group_are_ignored():
    """A node only handles messages addressed to its own group and id."""
    n = RawNode("a", "g", RaftConfig(), random.Random(1), conf=ConfState(peers=("a", "b")))
    n.step(RequestVote(group="other", src="b", dst="a", term=9, last_index=0, last_term=0))
    n.step(RequestVote(group="g", src="b", dst="c", term=9, last_index=0, last_term=0))
    assert n.term == 0


def test_non_voter_does_not_campaign():
    """A node outside the voters never starts an election."""
    n = RawNode("x", "g", RaftConfig(), random.Random(1), conf=ConfState(peers=("a", "b")))
    for _ in range(100):
        n.tick()
    assert n.term == 0
    assert n.role == "follower"


def test_bad_config_names_the_problem():
    """RaftConfig rejects unknown planted bugs and bad tick counts clearly."""
    with pytest.raises(ValueError, match="unknown planted bug"):
        RaftConfig(planted_bugs=frozenset({"nope"}))
    with pytest.raises(ValueError, match="heartbeat_ticks"):
        RaftConfig(election_timeout_ticks=2, heartbeat_ticks=2)


def test_entries_lost_in_flight_are_resent_while_heartbeats_are_answered():
    """A lost append is retried within an election timeout even though heartbeats get through."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=2)
    lost = []

    def drop(m):
        if isinstance(m, AppendEntries) and m.dst == "n2" and m.entries and not lost:
            lost.append(m)
            return True
        return False

    net.drop = drop
    net.nodes["n1"].propose(b"x")
    net.deliver()
    assert lost
    assert net.nodes["n2"].log.last_index == 1
    net.tick(times=12)
    assert net.nodes["n2"].log.last_index == 2


def test_compaction_past_a_config_entry_keeps_that_configuration():
    """After compacting over the last config entry, the configuration in force is unchanged."""
    net = Net(["n1", "n2", "n3"], voters=["n1", "n2", "n3"])
    net.add("n4")
    net.elect("n1")
    leader = net.nodes["n1"]
    ticket = leader.change_peers(["n1", "n2", "n3", "n4"], token=3)
    net.tick(times=3)
    assert ticket.result.ok
    leader.propose(b"x")
    net.tick(times=2)
    snap = leader.compact(leader.log.applied, b"state")
    assert snap.meta.conf.peers == ("n1", "n2", "n3", "n4")
    assert snap.meta.conf_token == 3
    # Re-deriving the configuration from the log (as a truncation would) must
    # fall back on the snapshot's configuration, not the bootstrap one.
    conf, _, token = conf_at(leader, leader.log.last_index)
    assert conf.peers == ("n1", "n2", "n3", "n4")
    assert token == 3


def test_a_late_joiner_learns_the_bootstrap_configuration_first():
    """A node fed from index 1 first gets the bootstrap configuration as the index-0 snapshot."""
    net = Net(["n1", "n2", "n3"])
    net.add("n4")
    net.elect("n1")
    leader = net.nodes["n1"]
    leader.change_peers(["n1", "n2", "n3", "n4"], learners=[], token=1)
    net.deliver()
    n4_applied = net.kinds("n4", "config-applied")
    assert n4_applied[0]["index"] == 0
    assert n4_applied[0]["peers"] == ["n1", "n2", "n3"]
    assert net.disks["n4"].snapshot is not None
    assert net.disks["n4"].snapshot.meta.index == 0
    # Original members were bootstrapped with it: they are not sent it again.
    assert [e["peer"] for e in net.kinds("n1", "snapshot-sent")] == ["n4"]
    # Its own compaction then records the right configuration.
    net.tick(times=3)
    n4 = net.nodes["n4"]
    snap = n4.compact(n4.log.applied, b"s")
    assert snap.meta.conf.peers == ("n1", "n2", "n3", "n4")


def test_transfer_to_a_non_voter_is_refused():
    """Leadership can only go to a voter."""
    net = Net(["n1", "n2", "n3", "l1"], voters=["n1", "n2", "n3"], learners=["l1"])
    net.elect("n1")
    with pytest.raises(InvalidConfig, match="l1: not a voter"):
        net.nodes["n1"].transfer_leader("l1")


def test_proposals_are_refused_during_a_transfer_and_a_stuck_transfer_is_abandoned():
    """While transferring the leader refuses proposals; after an election timeout it gives up."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=2)
    net.down.add("n2")
    leader = net.nodes["n1"]
    leader.propose(b"n2 misses this")
    net.deliver()
    leader.transfer_leader("n2")
    with pytest.raises(NotLeader, match="transfer to n2 in progress"):
        leader.propose(b"x")
    net.tick("n1", times=12)
    assert leader.role == "leader"
    assert leader.propose(b"y") > 0


def _beats(net: Net) -> list[AppendEntries]:
    """The leader n1's heartbeat round: the empty appends one tick of it sends."""
    net.deliver()
    net.nodes["n1"].tick()
    net.drain("n1")
    sent = [m for m in net.queue if isinstance(m, AppendEntries) and not m.entries]
    net.deliver()
    return sent


def test_a_round_skips_peers_told_the_commit_since_the_last_and_beats_idle_ones():
    """Busy peers that already know the commit get no heartbeat; an idle group beats."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=3)
    assert sorted(m.dst for m in _beats(net)) == ["n2", "n3"]  # idle: every round
    leader = net.nodes["n1"]
    leader.propose(b"x")
    net.deliver()  # the append, its answers, and the new commit told to the peers
    # The peer whose answer committed the entry was told the commit whole; the
    # other was told it capped at its match then: only that one is beaten.
    knows = {p for p in ("n2", "n3") if net.nodes[p].log.committed == leader.log.committed}
    assert knows
    assert sorted(m.dst for m in _beats(net)) == sorted({"n2", "n3"} - knows)
    assert all(net.nodes[p].log.committed == leader.log.committed for p in ("n2", "n3"))
    assert sorted(m.dst for m in _beats(net)) == ["n2", "n3"]  # idle again: every round


def test_a_peer_whose_last_message_capped_the_commit_still_gets_its_heartbeat():
    """The commit reached n3 capped at its old match: the next round tells it."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=3)
    leader = net.nodes["n1"]
    held: list[Message] = []
    net.drop = lambda m: (m.src == "n3" and isinstance(m, AppendEntriesResp)
                          and not held and (held.append(m) or True))  # fmt: skip
    leader.propose(b"x")
    net.deliver()  # n2 answers and commits; n3's answer is late
    net.drop = lambda m: False
    leader.step(held[0])
    net.deliver()
    assert net.nodes["n3"].log.committed < leader.log.committed
    assert [m.dst for m in _beats(net)] == ["n3"]
    assert net.nodes["n3"].log.committed == leader.log.committed


def test_a_commit_announced_to_a_streaming_peer_is_not_answered():
    """The heartbeat telling replicating peers a new commit asks for no
    answer; the peers still apply it, and a probing peer's still answers."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.tick(times=3)
    leader = net.nodes["n1"]
    net.log.clear()
    leader.propose(b"x")
    net.deliver()
    told = [ln for ln in net.log if ln.startswith("n1->") and "unanswered" in ln]
    assert told, net.log
    answers = [ln for ln in net.log if "AppendEntriesResp" in ln]
    assert len(answers) == 2  # the two acks of the append, nothing for the announcements
    net.tick("n1")  # a peer told the commit capped at its old match hears the rest now
    assert all(n.log.committed == leader.log.committed for n in net.nodes.values())
    assert [e.data for e in net.disks["n3"].applied if e.kind == "normal"] == [b"x"]

    leader.progress("n3").become_probe()
    leader.progress("n3").probe_sent = True  # its probe is out: no append can go
    net.log.clear()
    leader.propose(b"y")
    net.deliver()
    beat = [ln for ln in net.log if ln.startswith("n1->n3 AppendEntries") and "[" not in ln]
    assert beat, net.log
    assert not any("unanswered" in ln for ln in beat), net.log
    assert any(ln.startswith("n3->n1 AppendEntriesResp") for ln in net.log)


@pytest.mark.parametrize(("election", "heartbeat"), [(3, 2), (5, 2), (4, 3), (10, 2), (10, 1)])
def test_a_leader_on_a_healthy_network_keeps_its_quorum_whatever_its_timing(
    election: int, heartbeat: int
) -> None:
    """Every timing RaftConfig accepts keeps a leader whose peers all answer.
    A round skips a peer an answered message was sent to since the last
    round, so such a peer next hears from the leader two rounds later; with
    election_timeout_ticks=3 and heartbeat_ticks=2 that gap outgrew the
    quorum check's window, and a leader of a healthy group stepped down
    (sim seed 15 with election_timeout_ticks=3: 7 leader changes in the
    quiet period)."""
    config = RaftConfig(election_timeout_ticks=election, heartbeat_ticks=heartbeat)
    for offset in range(2 * election * heartbeat):  # every phase of a round against the check
        net = Net(["n1", "n2", "n3"], config=config)
        net.elect("n1")
        net.tick("n1", times=offset)
        leader = net.nodes["n1"]
        leader.propose(b"x")
        net.deliver()
        leader.read_index()  # answered beats: every peer may be skipped next round
        net.deliver()
        net.tick("n1", times=4 * election)
        assert leader.role == "leader", f"stepped down after offset {offset}"
        assert net.kinds("n1", "step-down") == []
