"""change_peers: jraft's catching-up, joint and stable stages and their failure paths."""

import pytest

from ember.raft import (
    AppendEntries,
    ChangeBusy,
    InstallSnapshotResp,
    NotLeader,
    RaftConfig,
    StaleToken,
    WrongTerm,
)

from .driver import Net

V3 = ["n1", "n2", "n3"]


def cluster(ids=V3, extra=(), **cfg) -> Net:
    net = Net(ids, config=RaftConfig(**cfg) if cfg else None)
    for i in extra:
        net.add(i)
    net.elect("n1")
    net.tick(times=2)
    return net


def kinds(net: Net, node: str) -> list[str]:
    return [e["kind"] for e in net.events[node]]


def conf_entries(net: Net, node: str) -> list[str]:
    out = []
    for e in net.disks[node].entries:
        if e.kind == "config":
            out.append("joint" if e.conf.is_joint else "stable")
    return out


def carries_config(m, stable_only: bool = False) -> bool:
    return isinstance(m, AppendEntries) and any(
        e.kind == "config" and (not stable_only or not e.conf.is_joint) for e in m.entries
    )


def test_add_peer_goes_through_catchup_joint_and_stable():
    """Adding a voter: catch-up, then C(old,new), then C(new); the ticket ends ok."""
    net = cluster(extra=["n4"])
    ticket = net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.tick(times=3)
    assert ticket.done
    assert ticket.result.ok
    stages = [e["stage"] for e in net.kinds("n1", "change-stage")]
    assert stages == ["catching-up", "joint", "stable", "none"]
    assert conf_entries(net, "n4") == ["joint", "stable"]
    assert net.nodes["n4"].conf.peers == ("n1", "n2", "n3", "n4")
    assert net.kinds("n1", "change-done")[0]["token"] == 1
    assert net.nodes["n1"].status().token == 1


def test_catchup_waits_until_the_new_peer_is_within_the_margin():
    """With margin 0 the joint entry waits for the new peer to hold the whole log."""
    net = cluster(extra=["n4"], catchup_margin=0, max_entries_per_append=2)
    leader = net.nodes["n1"]
    for i in range(10):
        leader.propose(b"%d" % i)
    net.tick(times=2)
    leader.change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.deliver()
    done = net.kinds("n1", "catchup-done")
    assert done[0]["match"] == done[0]["leader_last"]
    joint_at = kinds(net, "n1").index("config-appended")
    assert kinds(net, "n1").index("catchup-done") < joint_at


def test_catchup_timeout_is_retried_then_succeeds():
    """A wait that times out is retried; the peer catching up later completes the change."""
    net = cluster(extra=["n4"])
    net.down.add("n4")
    ticket = net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.tick(times=12)
    assert [e["attempt"] for e in net.kinds("n1", "catchup-timeout")] == [1]
    assert [e["attempt"] for e in net.kinds("n1", "catchup-retry")] == [2]
    assert net.nodes["n1"].status().stage == "catching-up"
    net.down.discard("n4")
    net.tick(times=5)
    assert ticket.result.ok


def test_catchup_fails_with_ecatchup_after_retries():
    """Exhausted retries reset the change with ECATCHUP and leave the configuration alone."""
    net = cluster(extra=["n4"], catchup_max_retries=2)
    net.down.add("n4")
    ticket = net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=7)
    net.tick(times=40)
    assert ticket.result.ok is False
    assert ticket.result.status == "ECATCHUP"
    assert [e["attempt"] for e in net.kinds("n1", "catchup-timeout")] == [1, 2, 3]
    err = net.kinds("n1", "change-error")
    assert err[0]["status"] == "ECATCHUP"
    assert err[0]["token"] == 7
    assert net.results[-1] == ticket.result
    leader = net.nodes["n1"]
    assert leader.conf.peers == ("n1", "n2", "n3")
    assert leader.status().stage == "none"
    assert leader.progress("n4") is None  # replication to the would-be peer stopped
    assert conf_entries(net, "n1") == []


def test_non_timeout_catchup_error_resets_with_ecatchup_at_once():
    """A failed snapshot install by a catching-up peer is not retried."""
    net = cluster(extra=["n4"])
    net.down.add("n4")
    leader = net.nodes["n1"]
    ticket = leader.change_peers(["n1", "n2", "n3", "n4"], token=1)
    leader.step(InstallSnapshotResp(group="g", src="n4", dst="n1", term=1, index=0, success=False))
    assert ticket.result.status == "ECATCHUP"
    assert not net.kinds("n1", "catchup-timeout")


def test_second_change_while_one_is_in_flight_is_busy():
    """Only one change per group: a second request gets ChangeBusy saying why."""
    net = cluster(extra=["n4", "n5"])
    net.down.add("n4")
    leader = net.nodes["n1"]
    leader.change_peers(["n1", "n2", "n3", "n4"], token=1)
    with pytest.raises(ChangeBusy, match=r"token 1.*catching-up") as busy:
        leader.change_peers(["n1", "n2", "n3", "n5"], token=2)
    assert busy.value.settling is False  # waiting would not help: the change runs on


def test_stale_token_changes_nothing():
    """A token older than the configuration in force is refused with the reason."""
    net = cluster(extra=["n4"])
    leader = net.nodes["n1"]
    leader.change_peers(["n1", "n2", "n3", "n4"], token=5)
    net.tick(times=3)
    before = len(net.disks["n1"].entries)
    with pytest.raises(StaleToken, match=r"token 3 is older.*token 5"):
        leader.change_peers(["n1", "n2", "n3"], token=3)
    net.deliver()
    assert len(net.disks["n1"].entries) == before
    assert leader.status().stage == "none"


def test_wrong_term_changes_nothing():
    """A request for another term is refused."""
    net = cluster(extra=["n4"])
    with pytest.raises(WrongTerm, match=r"term 7.*term 1"):
        net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1, term=7)
    assert net.nodes["n1"].status().stage == "none"


def test_change_on_a_follower_is_not_leader():
    """Only the leader accepts change_peers."""
    net = cluster()
    with pytest.raises(NotLeader):
        net.nodes["n2"].change_peers(["n1"], token=1)


def test_request_for_the_configuration_in_place_succeeds_at_once():
    """Idempotent: the same configuration completes immediately with no entries."""
    net = cluster()
    leader = net.nodes["n1"]
    last = leader.log.last_index
    ticket = leader.change_peers(["n3", "n2", "n1"], token=0)
    assert ticket.done
    assert ticket.result.ok
    assert leader.log.last_index == last
    assert leader.ready().change_results == [ticket.result]


def test_step_down_mid_change_reports_error_with_status_none():
    """A leader that loses leadership while catching up resets the change with status None."""
    net = cluster(extra=["n4"])
    net.down.add("n4")
    leader = net.nodes["n1"]
    ticket = leader.change_peers(["n1", "n2", "n3", "n4"], token=3)
    net.partition(["n1"], ["n2", "n3"])
    net.tick("n1", times=25)  # quorum loss is detected within two election timeouts
    assert leader.role == "follower"
    assert ticket.result.ok is False
    assert ticket.result.status is None
    err = net.kinds("n1", "change-error")
    assert err[0]["status"] is None
    assert err[0]["token"] == 3


def test_step_down_mid_joint_reports_error_and_new_leader_finishes_joint():
    """A leader deposed in JOINT reports status None; the next leader appends C(new)."""
    net = cluster(extra=["n4"])
    net.drop = lambda m: carries_config(m, stable_only=True)
    leader = net.nodes["n1"]
    ticket = leader.change_peers(["n1", "n2", "n3", "n4"], token=4)
    net.tick(times=2)
    assert leader.status().stage == "stable"  # C(new) appended but never replicated
    assert net.nodes["n2"].conf.is_joint
    net.drop = lambda m: False
    net.down.add("n1")
    net.nodes["n1"]._become_follower(leader.term + 1, None, "higher-term")
    net.drain("n1")
    assert ticket.result.status is None
    net.tick(times=40)
    new = net.leader()
    assert new is not None
    assert new.id != "n1"
    assert new.conf.peers == ("n1", "n2", "n3", "n4")
    assert not new.conf.is_joint
    assert net.kinds(new.id, "change-done")[0]["token"] == 4


def test_removed_leader_steps_down_and_wakes_the_longest_log_voter():
    """On C(new) commit a removed leader steps down and sends TimeoutNow to the best voter."""
    net = cluster(ids=["n1", "n2", "n3"], extra=["n4"])
    leader = net.nodes["n1"]
    net.partition(["n1"], ["n2"])  # n2 (the lowest id) falls behind
    leader.change_peers(["n2", "n3", "n4"], token=2)
    net.tick(times=4)
    assert [e["reason"] for e in net.kinds("n1", "step-down")] == ["removed"]
    assert [e["peer"] for e in net.kinds("n1", "timeout-now-sent")] == ["n3"]
    assert net.nodes["n3"].role == "leader"
    # The removed node knows its removal committed: it never campaigns again.
    net.heal()
    term = net.nodes["n1"].term
    net.tick(times=60)
    assert net.nodes["n1"].role == "follower"
    assert net.nodes["n1"].term == term
    assert net.nodes["n3"].role == "leader"


def test_disjoint_move_replaces_every_voter():
    """Old and new voter sets may be disjoint."""
    net = cluster(extra=["n4", "n5", "n6"])
    ticket = net.nodes["n1"].change_peers(["n4", "n5", "n6"], token=1)
    net.tick(times=30)
    assert ticket.result.ok
    leader = net.leader()
    assert leader is not None
    assert leader.id in {"n4", "n5", "n6"}
    leader.propose(b"after")
    net.tick(times=3)
    assert net.disks["n5"].applied[-1].data == b"after"


def test_joint_entry_needs_old_and_new_majorities():
    """With the old majority down C(old,new) does not commit; single-majority-joint (bug) does."""
    net = cluster(ids=["n1", "n2", "n3"], extra=["n4", "n5"])
    net.down.update({"n2", "n3"})
    leader = net.nodes["n1"]
    leader.change_peers(["n1", "n4", "n5"], token=1)
    net.tick(times=5)
    assert leader.conf.is_joint
    assert not net.kinds("n1", "config-committed")
    buggy = cluster(
        ids=["n1", "n2", "n3"],
        extra=["n4", "n5"],
        planted_bugs=frozenset({"single-majority-joint"}),
    )
    buggy.down.update({"n2", "n3"})
    buggy.nodes["n1"].change_peers(["n1", "n4", "n5"], token=1)
    buggy.tick(times=5)
    assert buggy.kinds("n1", "config-committed")


def test_learners_receive_entries_but_never_count():
    """Learners get the log; with voters down nothing commits (count-learners is the bug)."""
    for bugs, commits in ((frozenset(), False), (frozenset({"count-learners"}), True)):
        net = Net(
            [*V3, "l1", "l2"],
            voters=V3,
            learners=["l1", "l2"],
            config=RaftConfig(planted_bugs=bugs),
        )
        net.elect("n1")
        net.tick(times=2)
        net.down.update({"n2", "n3"})
        leader = net.nodes["n1"]
        before = leader.log.committed
        leader.propose(b"x")
        net.tick(times=2)
        assert net.nodes["l1"].log.last_index == leader.log.last_index
        assert (leader.log.committed > before) is commits


def test_skip_catchup_bug_appends_joint_before_the_peer_catches_up():
    """The planted skip-catchup bug goes joint with the new peer down."""
    net = cluster(extra=["n4"], planted_bugs=frozenset({"skip-catchup"}))
    net.down.add("n4")
    net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    assert net.nodes["n1"].conf.is_joint
    assert not net.kinds("n1", "catchup-start")


def test_skip_joint_bug_appends_the_stable_entry_directly():
    """The planted skip-joint bug never writes C(old,new)."""
    net = cluster(extra=["n4"], planted_bugs=frozenset({"skip-joint"}))
    net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.tick(times=3)
    assert conf_entries(net, "n1") == ["stable"]


def test_truncated_config_entry_rolls_the_configuration_back():
    """A follower whose uncommitted config entry is overwritten returns to the previous config."""
    ids = ["n1", "n2", "n3", "n4", "n5"]
    net = cluster(ids=ids)
    net.drop = lambda m: carries_config(m) and m.dst != "n2"
    net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.deliver()
    assert net.nodes["n2"].conf.is_joint
    net.down.update({"n1", "n2"})
    net.drop = lambda m: False
    net.tick(times=40)
    new = net.leader()
    assert new is not None
    assert new.id in {"n3", "n4", "n5"}
    net.down.discard("n2")
    net.restart("n2")
    net.tick(times=3)
    n2 = net.nodes["n2"]
    assert not n2.conf.is_joint
    assert n2.conf.peers == tuple(ids)
    applied = net.kinds("n2", "config-applied")
    assert applied[-1]["stage"] == "stable"
    assert applied[-1]["peers"] == ids


def test_new_peer_catches_up_from_a_snapshot():
    """A new peer whose needed entries are compacted installs a snapshot during catch-up."""
    net = cluster(extra=["n4"])
    leader = net.nodes["n1"]
    for i in range(30):
        leader.propose(b"%d" % i)
    net.tick(times=2)
    leader.compact(25, b"snap")
    ticket = leader.change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.tick(times=3)
    assert ticket.result.ok
    assert net.kinds("n4", "snapshot-installed")[0]["index"] == 25
    assert net.disks["n4"].snapshot.meta.conf.peers == ("n1", "n2", "n3")


def test_change_can_be_retried_after_ecatchup():
    """After ECATCHUP the same request (same token) can run again and succeed."""
    net = cluster(extra=["n4"], catchup_max_retries=0)
    net.down.add("n4")
    leader = net.nodes["n1"]
    first = leader.change_peers(["n1", "n2", "n3", "n4"], token=2)
    net.tick(times=12)
    assert first.result.status == "ECATCHUP"
    net.down.discard("n4")
    second = leader.change_peers(["n1", "n2", "n3", "n4"], token=2)
    net.tick(times=3)
    assert second.result.ok
    assert second.id != first.id


def test_demote_voter_to_learner_keeps_replicating_to_it():
    """A voter moved to learners leaves the majority but still receives entries."""
    net = cluster()
    leader = net.nodes["n1"]
    ticket = leader.change_peers(["n1", "n2"], ["n3"], token=1)
    net.tick(times=3)
    assert ticket.result.ok
    assert leader.conf.learners == ("n3",)
    leader.propose(b"after")
    net.tick(times=2)
    assert net.disks["n3"].applied[-1].data == b"after"
    assert not net.nodes["n3"]._is_promotable()


def test_old_voters_holding_an_uncommitted_removal_can_still_elect_a_leader():
    """If C(new) reached only the old voters, one of them campaigns and finishes the change."""
    net = cluster()
    leader = net.nodes["n1"]
    net.add("n4")
    net.add("n5")
    # C(new) = (n4 n5) gets appended by the old voters but never reaches n4, n5.
    net.drop = lambda m: carries_config(m, stable_only=True) and m.dst in {"n4", "n5"}
    leader.change_peers(["n4", "n5"], token=1)
    net.deliver()
    assert net.nodes["n2"].conf.peers == ("n4", "n5")
    assert net.nodes["n4"].conf.is_joint  # n4 holds C(old,new) only
    net.down.add("n1")  # the leader dies before C(new) commits
    net.drop = lambda m: False
    net.tick(times=60)
    new = net.leader()
    assert new is not None
    assert new.id in {"n4", "n5"}
    assert not new.conf.is_joint
    assert new.conf.peers == ("n4", "n5")


def test_change_waits_for_the_configuration_in_force_to_commit():
    """A new leader whose inherited C(new) is not yet committed refuses a change as busy."""
    net = cluster(extra=["n4"])
    # C(new) reaches n2 only; then n1 dies.
    net.drop = lambda m: carries_config(m, stable_only=True) and m.dst != "n2"
    net.nodes["n1"].change_peers(["n1", "n2", "n3", "n4"], token=1)
    net.deliver()
    net.down.add("n1")
    # n2 wins the next election but none of its appends get through yet.
    net.drop = lambda m: isinstance(m, AppendEntries) and m.src == "n2"
    for _ in range(100):
        if net.nodes["n2"].role == "leader":
            break
        net.tick()
    new = net.nodes["n2"]
    assert new.role == "leader"
    assert new.conf_index > new.log.committed
    # Until it commits, the change is not over: a driver polling the leader's
    # status must not take the inherited C(new) for done (M1).
    assert new.status().stage == "stable"
    with pytest.raises(ChangeBusy, match=r"not committed yet") as busy:
        new.change_peers(["n2", "n3", "n4"], token=2)
    assert busy.value.settling is True
    with pytest.raises(ChangeBusy, match=r"not committed yet"):
        new.change_peers(["n1", "n2", "n3", "n4"], token=1)  # not "already in place"
    net.drop = lambda m: False
    net.tick(times=3)
    assert new.status().stage == "none"
    assert new.change_peers(["n1", "n2", "n3", "n4"], token=1).done
    assert new.change_peers(["n2", "n3", "n4"], token=2).id > 0


def test_change_waits_for_an_entry_of_the_leaders_term_to_commit():
    """A new leader refuses a change as busy until its no-op commits (R7; seeds 19 and
    20 of the default sim plan started changes from a commit of an older term)."""
    net = cluster(extra=["n4"])
    net.drop = lambda m: isinstance(m, AppendEntries) and m.src == "n2"
    net.down.add("n1")
    for _ in range(100):
        if net.nodes["n2"].role == "leader":
            break
        net.tick()
    new = net.nodes["n2"]
    assert new.role == "leader"
    assert new.log.term(new.log.committed) != new.term
    with pytest.raises(ChangeBusy, match=r"no entry of term") as busy:
        new.change_peers(["n2", "n3", "n4"], token=2)
    assert busy.value.settling is True
    net.drop = lambda m: False
    net.tick(times=3)
    assert new.log.term(new.log.committed) == new.term
    assert new.change_peers(["n2", "n3", "n4"], token=2).id > 0
