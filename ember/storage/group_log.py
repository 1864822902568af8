"""One Raft group's durable state as held in memory: hard state, snapshot, log.

The write-ahead log records *changes* (`GroupOps`); this module says what a
change does, so the same code checks a write before it is staged and replays
it at recovery. The rules are Raft's:

- an entry at an index the log already holds truncates the log from there
  (a new leader overwrote a follower's uncommitted tail);
- a snapshot drops every entry it covers; entries after it survive only if
  the log holds the snapshot's last entry with the same term (the snapshot is
  a prefix of this log), else the whole log goes (Raft paper, InstallSnapshot
  step 6-7).
"""

from __future__ import annotations

import msgspec

from ember.raft import PersistedState
from ember.raft.messages import Entry, GroupId, HardState, Snapshot


class GroupOps(msgspec.Struct, frozen=True, kw_only=True):
    """One group's part of a write batch, applied in field order."""

    group: GroupId
    snapshot: Snapshot | None = None
    entries: tuple[Entry, ...] = ()
    hard_state: HardState | None = None
    # The group left this node: forget everything about it.
    drop: bool = False


class GroupLog:
    """In-memory image of one group's durable state."""

    __slots__ = ("entries", "hard_state", "snapshot")

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    @property
    def snapshot_index(self) -> int:
        """Index of the last entry the snapshot covers (0 without one)."""
        return self.snapshot.meta.index if self.snapshot is not None else 0

    @property
    def last_index(self) -> int:
        """Index of the last entry held, in the log or the snapshot."""
        return self.entries[-1].index if self.entries else self.snapshot_index

    def term_at(self, index: int) -> int | None:
        """Term of the entry at `index`, or None if the log does not hold it."""
        if self.snapshot is not None and index == self.snapshot.meta.index:
            return self.snapshot.meta.term
        if not self.entries:
            return None
        offset = index - self.entries[0].index
        if 0 <= offset < len(self.entries):
            return self.entries[offset].term
        return None

    def check(self, ops: GroupOps) -> None:
        """Raise ValueError if `ops` would leave a hole or go backwards."""
        snapshot_index = self.snapshot_index
        last_index = self.last_index
        if ops.snapshot is not None:
            new_index = ops.snapshot.meta.index
            if new_index < snapshot_index:
                raise ValueError(
                    f"group {ops.group}: snapshot at index {new_index} is older than "
                    f"the stored one at {snapshot_index}"
                )
            if self.term_at(new_index) != ops.snapshot.meta.term:
                last_index = new_index
            else:
                last_index = max(last_index, new_index)
            snapshot_index = new_index
        if ops.entries:
            first = ops.entries[0].index
            if first <= snapshot_index or first > last_index + 1:
                raise ValueError(
                    f"group {ops.group}: entries from index {first} do not follow "
                    f"the log (snapshot at {snapshot_index}, last index {last_index})"
                )
            for prev, entry in zip(ops.entries, ops.entries[1:], strict=False):
                if entry.index != prev.index + 1:
                    raise ValueError(
                        f"group {ops.group}: entries jump from index {prev.index} to {entry.index}"
                    )

    def apply(self, ops: GroupOps) -> None:
        """Apply a checked change (at staging time and again at recovery)."""
        if ops.snapshot is not None:
            self._apply_snapshot(ops.snapshot)
        if ops.entries:
            first = ops.entries[0].index
            keep = first - self.entries[0].index if self.entries else 0
            del self.entries[max(keep, 0) :]
            self.entries.extend(ops.entries)
        if ops.hard_state is not None:
            self.hard_state = ops.hard_state

    def _apply_snapshot(self, snapshot: Snapshot) -> None:
        index, term = snapshot.meta.index, snapshot.meta.term
        if self.term_at(index) == term:
            # Compaction, or a snapshot that is a prefix of this log: keep the tail.
            keep_from = index + 1 - self.entries[0].index if self.entries else 0
            del self.entries[: max(keep_from, 0)]
        else:
            self.entries.clear()
        self.snapshot = snapshot

    def image(self, group: GroupId) -> GroupOps:
        """The whole state as one change that rebuilds it on an empty log."""
        return GroupOps(
            group=group,
            snapshot=self.snapshot,
            entries=tuple(self.entries),
            hard_state=self.hard_state,
        )

    def persisted(self) -> PersistedState:
        """A copy of the state, as a restart hands it to the Raft core."""
        return PersistedState(
            hard_state=self.hard_state, snapshot=self.snapshot, entries=list(self.entries)
        )
