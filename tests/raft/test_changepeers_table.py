"""The change-peers transition table and catch-up wait bookkeeping."""

import pytest

from ember.raft import ConfState
from ember.raft.changepeers import TRANSITIONS, ChangeContext, Event, Stage, TransitionError


def ctx(max_retries: int = 2) -> ChangeContext:
    old = ConfState(peers=("a", "b", "c"))
    new = ConfState(peers=("a", "b", "d"))
    return ChangeContext(None, 1, old, new, wait_ticks=3, max_retries=max_retries)


def test_happy_path_walks_none_catching_joint_stable_none():
    """start, caught-up, joint-committed, stable-committed: back to NONE."""
    c = ctx()
    seen = [
        c.fire(e)
        for e in (Event.START, Event.CAUGHT_UP, Event.JOINT_COMMITTED, Event.STABLE_COMMITTED)
    ]
    assert seen == [Stage.CATCHING_UP, Stage.JOINT, Stage.STABLE, Stage.NONE]


def test_transition_not_in_the_table_is_refused():
    """A joint-committed event while catching up is a bug, loudly."""
    c = ctx()
    c.fire(Event.START)
    with pytest.raises(TransitionError, match="no transition"):
        c.fire(Event.JOINT_COMMITTED)


def test_reset_is_allowed_from_every_active_stage():
    """Step-down may happen at any stage of a change."""
    for stage in (Stage.CATCHING_UP, Stage.JOINT, Stage.STABLE):
        assert TRANSITIONS[(stage, Event.RESET)] is Stage.NONE
    assert (Stage.NONE, Event.RESET) not in TRANSITIONS


def test_new_voters_are_target_voters_not_voting_now():
    """Only voters that are new must catch up."""
    assert ctx().new_voters() == ["d"]


def test_wait_times_out_retries_then_is_exhausted():
    """Each wait lasts wait_ticks; after max_retries retries the next timeout is final."""
    c = ctx(max_retries=2)
    c.start_waits(["d"])
    outcomes = []
    for _ in range(9):
        outcomes += [(t.attempt, t.exhausted) for t in c.tick()]
    assert outcomes == [(1, False), (2, False), (3, True)]


def test_caught_up_peer_stops_waiting():
    """A caught-up peer no longer times out."""
    c = ctx()
    c.start_waits(["d"])
    assert c.caught_up("d")
    assert not c.caught_up("d")
    assert [c.tick() for _ in range(5)] == [[]] * 5
