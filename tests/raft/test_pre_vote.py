"""Pre-Vote (Raft thesis 9.6): a node asks before it campaigns, so a node cut off
from its group keeps its term and rejoining does not depose a working leader."""

from ember.raft import RaftConfig, RequestVote
from ember.raft import _election as election
from ember.raft.messages import RequestVoteResp

from .driver import Net


def _isolate_and_rejoin(pre_vote: bool) -> Net:
    """n3 is cut off from both peers for 6 election timeouts, then healed."""
    net = Net(["n1", "n2", "n3"], config=RaftConfig(election_timeout_ticks=10, pre_vote=pre_vote))
    net.elect("n1")
    net.terms_before = len(net.kinds("n3", "term"))  # type: ignore[attr-defined]
    net.partition(["n3"], ["n1", "n2"])
    net.tick(times=60)
    net.heal()
    net.tick(times=30)
    return net


def test_an_isolated_node_keeps_its_term_and_the_leader_survives_its_return():
    net = _isolate_and_rejoin(pre_vote=True)
    n1, n3 = net.nodes["n1"], net.nodes["n3"]
    assert len(net.kinds("n3", "pre-campaign")) >= 3  # it did time out, again and again
    assert len(net.kinds("n3", "term")) == net.terms_before  # ... without raising its term
    assert (n1.role, n1.term) == ("leader", 1)
    assert not net.kinds("n1", "step-down")
    assert (n3.role, n3.leader, n3.term) == ("follower", "n1", 1)


def test_without_pre_vote_the_returning_node_deposes_the_leader():
    """The same schedule without Pre-Vote: the contrast the option exists for."""
    net = _isolate_and_rejoin(pre_vote=False)
    assert net.nodes["n3"].term > 3
    assert [e["reason"] for e in net.kinds("n1", "step-down")] == ["higher-term"]


def test_a_pre_vote_changes_neither_side_s_term_nor_vote():
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    n2 = net.nodes["n2"]
    n2._election_elapsed = 12  # no word from n1 for longer than the lease
    n2.leader = None
    n2.step(RequestVote(group="g", src="n3", dst="n2", term=5, last_index=9, last_term=1, pre=True))
    assert (n2.term, n2.vote) == (1, "n1")
    answer = n2._msgs[-1]
    assert isinstance(answer, RequestVoteResp)
    assert (answer.pre, answer.granted, answer.term) == (True, True, 5)
    assert net.nodes["n2"]._events[-1]["kind"] == "pre-vote-granted"


def test_a_voter_in_the_lease_ignores_a_pre_vote():
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    n2 = net.nodes["n2"]
    n2._msgs.clear()
    n2.step(RequestVote(group="g", src="n3", dst="n2", term=2, last_index=9, last_term=1, pre=True))
    assert not n2._msgs
    assert n2._events[-1] == {"kind": "vote-ignored", "group": "g", "term": 1,
                              "candidate": "n3", "reason": "leader-lease", "pre": True}  # fmt: skip


def stale_log_pre_vote() -> Net:
    """n3 missed an entry, the leader is gone, and n3 asks first: both refuse."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.partition(["n3"], ["n1", "n2"])
    net.nodes["n1"].propose(b"x")
    net.tick(times=2)
    net.nodes["n1"]._become_follower(1, None, "lost-quorum")  # n1 and n2 lost their leader
    for voter in ("n1", "n2"):
        net.nodes[voter]._election_elapsed = 12
    net.heal()
    n3 = net.nodes["n3"]
    n3._election_elapsed = n3._timeout - 1
    n3.tick()
    net.deliver()
    return net


def test_a_stale_log_loses_the_pre_vote_and_the_term_stays():
    """Voters with a longer log refuse; the asker emits pre-vote-lost and stays put."""
    net = stale_log_pre_vote()
    n3 = net.nodes["n3"]
    assert net.kinds("n3", "pre-vote-lost")
    assert (n3.term, n3.role) == (1, "follower")


def test_a_refusal_from_a_higher_term_makes_the_asker_a_follower_of_it():
    net = Net(["n1", "n2", "n3"])
    n3 = net.nodes["n3"]
    n3._prevoting = True
    n3.step(RequestVoteResp(group="g", src="n2", dst="n3", term=7, granted=False, pre=True))
    assert (n3.term, n3.role) == (7, "follower")


def test_a_dead_leader_is_replaced_one_term_later():
    """Pre-Vote costs one round trip, not a term: the next leader is at term 2."""
    net = Net(["n1", "n2", "n3"])
    net.elect("n1")
    net.down.add("n1")
    net.tick(times=40)
    leader = net.leader()
    assert leader is not None
    assert leader.id != "n1"
    assert leader.term == 2


def test_a_late_vote_is_not_counted_with_the_next_rounds_pre_votes():
    """A candidate that timed out pre-votes for term + 1; a vote of its old term
    arriving then must not join those Pre-Votes into a quorum (sim seed 9143)."""
    net = Net(["n1", "n2", "n3", "n4", "n5"])
    n4 = net.nodes["n4"]
    election.campaign(n4, force=False)
    term = n4.term
    election.pre_campaign(n4)  # its election timed out: the next round begins
    election.handle_pre_vote_resp(
        n4,
        RequestVoteResp(group=n4.group, src="n1", dst="n4", term=term + 1, granted=True, pre=True),
    )
    election.handle_vote_resp(
        n4, RequestVoteResp(group=n4.group, src="n2", dst="n4", term=term, granted=True)
    )
    assert n4.role == "candidate"  # two real votes of five are no quorum
    assert n4.term == term
