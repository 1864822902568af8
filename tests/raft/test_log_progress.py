"""The in-memory log and the per-follower flow control."""

import pytest

from ember.raft import ConfState, Entry, LogError
from ember.raft.log import RaftLog
from ember.raft.progress import Progress


def ents(*terms: int, start: int = 1) -> list[Entry]:
    return [Entry(term=t, index=start + i) for i, t in enumerate(terms)]


def test_conflicting_suffix_is_truncated_and_reported():
    """A follower replaces its uncommitted tail from the first conflict."""
    log = RaftLog(entries=ents(1, 1, 2, 2))
    res = log.maybe_append(2, 1, ents(3, 3, start=3), commit=0)
    assert res == (4, 3)
    assert [e.term for e in log.entries] == [1, 1, 3, 3]
    assert log.stable_last == 2


def test_mismatch_at_prev_is_refused():
    """An append whose prev does not match changes nothing."""
    log = RaftLog(entries=ents(1, 1))
    assert log.maybe_append(2, 5, ents(5, start=3), commit=3) is None
    assert log.last_index == 2
    assert log.committed == 0


def test_conflict_below_commit_is_a_log_error():
    """Committed entries are never overwritten."""
    log = RaftLog(entries=ents(1, 1), committed=2)
    with pytest.raises(LogError, match="committed"):
        log.maybe_append(1, 1, ents(2, start=2), commit=2)


def test_compaction_keeps_terms_and_drops_entries():
    """After compacting, the snapshot index still has a term; below it, none."""
    log = RaftLog(entries=ents(1, 1, 2, 2), committed=4)
    log.applied_to(3)
    snap = log.compact(3, b"state", ConfState(peers=("a",)), 0)
    assert snap.meta.index == 3
    assert snap.meta.term == 2
    assert log.term(3) == 2
    assert log.term(2) is None
    assert [e.index for e in log.entries] == [4]
    with pytest.raises(LogError, match="only 3 is applied"):
        log.compact(4, b"", ConfState(peers=("a",)), 0)


def test_up_to_date_compares_term_then_index():
    """§5.4.1: a later last term wins; equal terms compare length."""
    log = RaftLog(entries=ents(1, 2, 2))
    assert log.is_up_to_date(1, 3)
    assert log.is_up_to_date(3, 2)
    assert not log.is_up_to_date(2, 2)
    assert not log.is_up_to_date(9, 1)


def test_replicate_state_caps_inflight_appends():
    """At most max_inflight appends are unacknowledged; an ack frees slots."""
    pr = Progress(1, max_inflight=2)
    pr.maybe_update(0)
    pr.become_replicate()
    pr.sent(1, 1)
    assert not pr.is_paused()
    pr.sent(2, 1)
    assert pr.is_paused()
    pr.maybe_update(1)
    assert not pr.is_paused()
    assert pr.next == 3


def test_probe_state_sends_one_at_a_time():
    """A probing follower is paused after one append until it answers."""
    pr = Progress(5, max_inflight=4)
    pr.sent(4, 0)
    assert pr.is_paused()
    assert pr.maybe_decrease(4, 1)
    assert pr.next == 2
    assert not pr.is_paused()


def test_stale_rejection_is_ignored():
    """A rejection for an append we no longer wait on changes nothing."""
    pr = Progress(5, max_inflight=4)
    assert not pr.maybe_decrease(2, 0)
    assert pr.next == 5
