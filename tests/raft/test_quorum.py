"""Quorum math: single and joint majorities; learners never count."""

from hypothesis import given
from hypothesis import strategies as st

from ember.raft import ConfState
from ember.raft.quorum import (
    joint_committed,
    joint_vote,
    majority_committed,
    majority_vote,
    members,
    voters,
)


def test_majority_committed_is_the_median_match():
    """Three voters commit what two of them hold."""
    assert majority_committed(["a", "b", "c"], {"a": 5, "b": 3, "c": 1}) == 3
    assert majority_committed(["a", "b", "c", "d"], {"a": 5, "b": 3, "c": 1, "d": 9}) == 3


def test_missing_voters_count_as_zero():
    """A voter we have no match for holds nothing."""
    assert majority_committed(["a", "b", "c"], {"a": 5}) == 0


def test_joint_commit_needs_both_majorities():
    """C(old, new) commits only what a majority of each half holds."""
    conf = ConfState(peers=("d", "e", "f"), old_peers=("a", "b", "c"))
    match = {"a": 9, "b": 9, "c": 9, "d": 9, "e": 2, "f": 1}
    assert joint_committed(conf, match) == 2
    match["e"] = 9
    assert joint_committed(conf, match) == 9


def test_learners_never_count_in_commit():
    """Learners' matches are ignored: they are not in peers."""
    conf = ConfState(peers=("a", "b", "c"), learners=("x", "y", "z"))
    match = {"a": 7, "x": 9, "y": 9, "z": 9}
    assert joint_committed(conf, match) == 0


def test_vote_won_lost_pending():
    """A vote is decided as soon as the outcome cannot change."""
    vs = ["a", "b", "c"]
    assert majority_vote(vs, {"a": True}) == "pending"
    assert majority_vote(vs, {"a": True, "b": True}) == "won"
    assert majority_vote(vs, {"a": True, "b": False, "c": False}) == "lost"


def test_joint_vote_needs_both_halves():
    """Winning the new half alone is not enough in a joint configuration."""
    conf = ConfState(peers=("d", "e", "f"), old_peers=("a", "b", "c"))
    assert joint_vote(conf, {"d": True, "e": True}) == "pending"
    assert joint_vote(conf, {"d": True, "e": True, "a": False, "b": False}) == "lost"
    assert joint_vote(conf, {"d": True, "e": True, "a": True, "b": True}) == "won"


def test_learner_votes_do_not_elect():
    """Granted votes from learners do not make a majority."""
    conf = ConfState(peers=("a", "b", "c"), learners=("x", "y"))
    assert joint_vote(conf, {"a": True, "x": True, "y": True}) == "pending"


def test_voters_and_members():
    """Voters are both halves; members add learners."""
    conf = ConfState(peers=("b", "c"), old_peers=("a", "b"), learners=("x",))
    assert voters(conf) == {"a", "b", "c"}
    assert members(conf) == {"a", "b", "c", "x"}


ids = st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=7, unique=True)


@given(ids, st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 50)))
def test_committed_index_is_held_by_a_majority(vs, match):
    """Whatever majority_committed returns, more than half the voters hold it."""
    c = majority_committed(vs, match)
    holders = sum(1 for v in vs if match.get(v, 0) >= c)
    assert holders * 2 > len(vs)
    # ... and it is the largest such index.
    above = sum(1 for v in vs if match.get(v, 0) >= c + 1)
    assert above * 2 <= len(vs)


@given(ids, ids, st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 50)))
def test_joint_commit_is_at_most_each_half(new, old, match):
    """A joint commit index never exceeds either half's own."""
    conf = ConfState(peers=tuple(sorted(new)), old_peers=tuple(sorted(old)))
    c = joint_committed(conf, match)
    assert c == min(majority_committed(new, match), majority_committed(old, match))
