"""One node's copy of one group's log, as the omniscient checker keeps it.

Theory of operation: the checker (ember.sim.omniscient) keeps two views per
node and group: `written`, every Ready applied as the node takes it (what
it handed its store, not yet fsync'd), and `durable`, the same applied when
the store's commit returns. A node that starts (or restarts after a crash)
sets both to what its store read back, so the views follow the real disk
and never guess what a crash kept. The node's local compactions are not
mirrored: a view may hold more entries than the node, never fewer.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ember.raft import ConfState, Entry, HardState, PersistedState, Snapshot


class LogView:
    """A snapshot, the contiguous entries after it, and the hard state."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self.hard_state = HardState()
        self.snapshot = snapshot
        self.entries: list[Entry] = []
        # Indexes of configuration entries in `entries`, ascending.
        self.config_indexes: list[int] = []

    @property
    def snap_index(self) -> int:
        return self.snapshot.meta.index if self.snapshot else 0

    @property
    def last_index(self) -> int:
        return self.snap_index + len(self.entries)

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`; None if compacted away or absent."""
        snap = self.snap_index
        if index == snap:
            return self.snapshot.meta.term if self.snapshot else 0
        if snap < index <= self.last_index:
            return self.entries[index - snap - 1].term
        return None

    def entry(self, index: int) -> Entry | None:
        """The entry at `index`, or None if compacted away or absent."""
        snap = self.snap_index
        if snap < index <= self.last_index:
            return self.entries[index - snap - 1]
        return None

    def write(
        self, snapshot: Snapshot | None, entries: Sequence[Entry], hard_state: HardState | None
    ) -> list[Entry]:
        """Apply one Ready's durable part: snapshot, then entries, then hard state.

        A snapshot keeps the entries after it when the log holds its last entry
        with the same term, as the store does (ember.storage.group_log). Returns
        the entries the write removed from the tail (a truncation).
        """
        removed: list[Entry] = []
        if snapshot is not None:
            index = snapshot.meta.index
            keep = self.term_at(index) == snapshot.meta.term
            self.entries = [e for e in self.entries if e.index > index] if keep else []
            self.config_indexes = [i for i in self.config_indexes if i > index] if keep else []
            self.snapshot = snapshot
        if entries:
            removed = self._append(entries)
        if hard_state is not None:
            self.hard_state = hard_state
        return removed

    def _append(self, entries: Sequence[Entry]) -> list[Entry]:
        first = entries[0].index
        snap = self.snap_index
        if first <= snap:
            # Entries the snapshot already covers: keep only those after it.
            entries = [e for e in entries if e.index > snap]
            if not entries:
                return []
            first = entries[0].index
        if first > self.last_index + 1:
            raise ValueError(f"log gap: writing index {first} after last index {self.last_index}")
        removed = self.entries[first - snap - 1 :]
        del self.entries[first - snap - 1 :]
        del self.config_indexes[bisect.bisect_left(self.config_indexes, first) :]
        self.entries.extend(entries)
        self.config_indexes.extend(e.index for e in entries if e.kind == "config")
        return removed

    def conf_before(self, index: int) -> tuple[int, ConfState | None, int]:
        """(index, conf, token) of the last configuration strictly before `index`.

        Falls back to the snapshot's configuration; (0, None, 0) if unknown.
        """
        pos = bisect.bisect_left(self.config_indexes, index)
        if pos:
            e = self.entries[self.config_indexes[pos - 1] - self.snap_index - 1]
            return e.index, e.conf, e.token
        if self.snapshot is not None:
            return self.snap_index, self.snapshot.meta.conf, self.snapshot.meta.conf_token
        return 0, None, 0

    def copy(self) -> LogView:
        """An independent copy (entries are immutable and shared)."""
        other = LogView(self.snapshot)
        other.hard_state = self.hard_state
        other.entries = list(self.entries)
        other.config_indexes = list(self.config_indexes)
        return other

    @classmethod
    def of(cls, state: PersistedState) -> LogView:
        """The view of what a store read back."""
        view = cls(state.snapshot)
        view.hard_state = state.hard_state
        if state.entries:
            view.write(None, state.entries, None)
        return view
