"""ReadIndex in the core: a read is confirmed only by a quorum at the leader's term."""

from __future__ import annotations

import pytest

from ember.raft import AppendEntries, AppendEntriesResp, Message, NotLeader, RaftConfig
from tests.raft.driver import Net


def _net(ids: list[str], **kw: object) -> Net:
    net = Net(ids, **kw)  # type: ignore[arg-type]
    net.elect(ids[0])
    net.deliver()
    return net


def test_a_read_is_confirmed_after_a_quorum_answers_its_heartbeat() -> None:
    """The read index is the commit index when asked; nothing is ready before the answers."""
    net = _net(["n1", "n2", "n3"])
    leader = net.nodes["n1"]
    commit = leader.log.committed
    ctx = leader.read_index()
    assert leader.take_reads() == []
    net.deliver()
    assert leader.take_reads() == [(ctx, commit)]
    assert leader.take_reads() == []


def test_one_answer_suffices_in_three_but_none_confirms_nothing() -> None:
    """A majority counts the leader itself: one follower's answer is enough, none is not."""
    net = _net(["n1", "n2", "n3"])
    leader = net.nodes["n1"]
    net.partition(["n1"], ["n2", "n3"])
    ctx = leader.read_index()
    net.deliver()
    assert leader.take_reads() == []
    net.heal()
    net.partition(["n1"], ["n3"])
    leader.read_index()  # a later context: its answer confirms the earlier read too
    net.deliver()
    assert [c for c, _ in leader.take_reads()] == [ctx, ctx + 1]


def test_reads_are_refused_by_followers_and_by_a_leader_without_an_own_term_commit() -> None:
    """No read at a follower; none at a new leader before its no-op commits."""
    net = Net(["n1", "n2", "n3"])
    net.drop = lambda m: isinstance(m, AppendEntries)  # the no-op cannot commit
    net.elect("n1")
    leader = net.nodes["n1"]
    with pytest.raises(NotLeader, match="not committed an entry in term"):
        leader.read_index()
    with pytest.raises(NotLeader):
        net.nodes["n2"].read_index()
    net.drop = lambda m: False
    net.tick("n1")
    ctx = leader.read_index()
    net.deliver()
    assert leader.take_reads() == [(ctx, leader.log.committed)]


def test_a_stale_leader_never_confirms_a_read_and_forgets_it_on_stepping_down() -> None:
    """An isolated old leader's read gets no quorum while the others elect a new
    leader that commits a write; the old one steps down and the read is gone."""
    net = _net(["n1", "n2", "n3"])
    old = net.nodes["n1"]
    net.partition(["n1"], ["n2", "n3"])
    old.read_index()
    for _ in range(200):
        net.tick()
        assert old.take_reads() == []
        new = net.leader()
        if new is not None and new.id != "n1" and old.role != "leader":
            break
    else:
        raise AssertionError("no new leader")
    new.propose(b"w")
    net.deliver()
    assert new.log.committed > old.log.committed
    net.heal()
    net.tick(times=3)
    assert old.role == "follower"
    assert old.take_reads() == []
    assert old._reads_pending == []


def test_answers_from_a_previous_term_do_not_count() -> None:
    """Acks recorded while leading are dropped with the role: a re-elected leader starts over."""
    net = _net(["n1", "n2", "n3"])
    leader = net.nodes["n1"]
    leader.read_index()
    net.deliver()
    leader.take_reads()
    assert leader._read_acks
    leader._become_follower(leader.term + 1, None, "test")
    assert leader._read_acks == {}
    assert leader._reads_pending == []


def test_a_single_voter_reads_at_once_and_learners_are_not_asked() -> None:
    """Quorum of one: confirmed immediately; a learner gets no read heartbeat."""
    net = Net(["n1", "n2"], voters=["n1"], learners=["n2"])
    net.elect("n1")
    net.deliver()
    leader = net.nodes["n1"]
    sent: list[Message] = []
    ctx = leader.read_index()
    assert leader.take_reads() == [(ctx, leader.log.committed)]
    sent.extend(leader.ready().messages)
    assert not any(isinstance(m, AppendEntries) and m.read_ctx for m in sent)


def test_followers_echo_the_context_in_their_answers() -> None:
    """Every answer to a read heartbeat carries its context back."""
    net = _net(["n1", "n2", "n3"], config=RaftConfig(election_timeout_ticks=10))
    leader = net.nodes["n1"]
    leader.read_index()
    answers: list[AppendEntriesResp] = []

    def keep(m: Message) -> bool:
        if isinstance(m, AppendEntriesResp):
            answers.append(m)
            return True
        return False

    net.drop = keep
    net.deliver()
    assert len(answers) == 2
    assert all(a.read_ctx == 1 for a in answers)
