"""confchange: preconditions on input and invariants on output."""

import pytest

from ember.raft import ConfState, InvalidConfig
from ember.raft import confchange as cc


def test_stable_sorts_and_checks():
    """A stable configuration comes out sorted."""
    conf = cc.stable(["c", "a", "b"], ["x"])
    assert conf == ConfState(peers=("a", "b", "c"), learners=("x",))


@pytest.mark.parametrize(
    ("peers", "learners", "needle"),
    [
        ([], [], "at least one voter"),
        (["a", "a"], [], "more than once"),
        (["a", "b"], ["b"], "both voter and learner"),
        (["a", ""], [], "non-empty node id"),
    ],
)
def test_bad_configurations_are_refused_with_a_reason(peers, learners, needle):
    """Each precondition fails with a message naming the problem."""
    with pytest.raises(InvalidConfig, match=needle):
        cc.stable(peers, learners)


def test_enter_joint_keeps_old_voters():
    """C(old, new) has the target's voters and learners and the old voters."""
    joint = cc.enter_joint(cc.stable(["a", "b", "c"]), cc.stable(["c", "d", "e"], ["f"]))
    assert joint == ConfState(peers=("c", "d", "e"), old_peers=("a", "b", "c"), learners=("f",))


def test_disjoint_sets_are_allowed():
    """Old and new voter sets may share nobody."""
    joint = cc.enter_joint(cc.stable(["a", "b", "c"]), cc.stable(["d", "e", "f"]))
    assert joint.old_peers == ("a", "b", "c")
    assert cc.leave_joint(joint) == cc.stable(["d", "e", "f"])


def test_cannot_enter_joint_twice():
    """A joint configuration cannot start another change."""
    joint = cc.enter_joint(cc.stable(["a"]), cc.stable(["b"]))
    with pytest.raises(InvalidConfig, match="from a joint one"):
        cc.enter_joint(joint, cc.stable(["c"]))


def test_cannot_leave_a_stable_configuration():
    """leave_joint needs a joint input."""
    with pytest.raises(InvalidConfig, match="not in one"):
        cc.leave_joint(cc.stable(["a"]))


def test_input_is_not_mutated():
    """The input configuration is left as it was (frozen copies only)."""
    cur = cc.stable(["a", "b", "c"])
    before = (cur.peers, cur.old_peers, cur.learners)
    cc.enter_joint(cur, cc.stable(["d"]))
    assert (cur.peers, cur.old_peers, cur.learners) == before


def test_unsorted_conf_fails_the_output_check():
    """check() refuses a hand-built configuration that is not normalized."""
    with pytest.raises(InvalidConfig, match="sorted and unique"):
        cc.check(ConfState(peers=("b", "a")))
