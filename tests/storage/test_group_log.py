"""Raft's log rules as the store applies them: truncation, snapshots, holes."""

import pytest

from ember.raft.messages import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from ember.storage import GroupOps
from ember.storage.group_log import GroupLog


def entries(first: int, last: int, term: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(term=term, index=i, data=f"{i}".encode()) for i in range(first, last + 1))


def snapshot(index: int, term: int) -> Snapshot:
    return Snapshot(meta=SnapshotMeta(index=index, term=term, conf=ConfState(peers=("n1",))))


def apply(log: GroupLog, **fields: object) -> None:
    ops = GroupOps(group="g", **fields)  # type: ignore[arg-type]
    log.check(ops)
    log.apply(ops)


def test_entry_at_existing_index_truncates_the_tail() -> None:
    """A write at index 3 replaces entries 3.. of the old log."""
    log = GroupLog()
    apply(log, entries=entries(1, 5))
    apply(log, entries=entries(3, 3, term=2))
    assert [(e.index, e.term) for e in log.entries] == [(1, 1), (2, 1), (3, 2)]


def test_entries_leaving_a_hole_are_refused() -> None:
    """Appending index 7 after last index 5 raises instead of storing a gap."""
    log = GroupLog()
    apply(log, entries=entries(1, 5))
    with pytest.raises(ValueError, match="do not follow"):
        log.check(GroupOps(group="g", entries=entries(7, 8)))


def test_non_contiguous_batch_is_refused() -> None:
    """A batch whose indexes jump raises, naming the jump."""
    bad = (Entry(term=1, index=1), Entry(term=1, index=3))
    with pytest.raises(ValueError, match="jump from index 1 to 3"):
        GroupLog().check(GroupOps(group="g", entries=bad))


def test_matching_snapshot_compacts_and_keeps_the_tail() -> None:
    """A snapshot at (3, term 1) drops entries 1..3 and keeps 4..5."""
    log = GroupLog()
    apply(log, entries=entries(1, 5))
    apply(log, snapshot=snapshot(3, 1))
    assert [e.index for e in log.entries] == [4, 5]
    assert log.last_index == 5


def test_conflicting_snapshot_discards_the_whole_log() -> None:
    """A snapshot whose last term differs from the log's discards every entry."""
    log = GroupLog()
    apply(log, entries=entries(1, 5))
    apply(log, snapshot=snapshot(4, 2))
    assert log.entries == []
    assert log.last_index == 4


def test_snapshot_beyond_the_log_then_entries_after_it() -> None:
    """Installing a snapshot past the log's end lets entries continue after it."""
    log = GroupLog()
    apply(log, entries=entries(1, 2))
    apply(log, snapshot=snapshot(10, 3), entries=entries(11, 12, term=3))
    assert [e.index for e in log.entries] == [11, 12]


def test_older_snapshot_is_refused() -> None:
    """A snapshot older than the stored one raises."""
    log = GroupLog()
    apply(log, snapshot=snapshot(10, 3))
    with pytest.raises(ValueError, match="older"):
        log.check(GroupOps(group="g", snapshot=snapshot(5, 1)))


def test_entries_inside_the_snapshot_are_refused() -> None:
    """Entries at or below the snapshot index raise."""
    log = GroupLog()
    apply(log, snapshot=snapshot(10, 3))
    with pytest.raises(ValueError):
        log.check(GroupOps(group="g", entries=entries(10, 11)))


def test_reapplying_a_change_is_idempotent() -> None:
    """Replaying the same change twice leaves the same state (rotation safety)."""
    log = GroupLog()
    apply(log, entries=entries(1, 5))
    ops = GroupOps(
        group="g", snapshot=snapshot(3, 1), entries=entries(5, 6, 2), hard_state=HardState(term=2)
    )
    log.check(ops)
    log.apply(ops)
    first = log.persisted()
    log.check(ops)
    log.apply(ops)
    assert log.persisted() == first
