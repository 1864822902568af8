"""The in-memory Raft log: a snapshot offset, then contiguous entries.

Indexes run `offset+1 .. last_index` in `entries`; `offset` is the index of
the last snapshot (0 without one) and `offset_term` its term, so the term of
every index from `offset` up is known. Entries above `stable_last` are
unstable: the driver has not yet persisted them (Ready.entries hands them
out, advance marks them stable). `committed` never moves back; `applied`
trails it. A follower that receives a snapshot it lacks restores from it: the
log restarts after the snapshot and `pending_snapshot` waits for the driver.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import LogError
from .messages import ConfState, Entry, Snapshot, SnapshotMeta


class RaftLog:
    """Entries after a snapshot, with commit/apply/stable cursors."""

    def __init__(
        self, snapshot: Snapshot | None = None, entries: Sequence[Entry] = (), committed: int = 0
    ) -> None:
        self.snapshot = snapshot
        self.offset = snapshot.meta.index if snapshot else 0
        self.offset_term = snapshot.meta.term if snapshot else 0
        self.entries: list[Entry] = [e for e in entries if e.index > self.offset]
        for pos, e in enumerate(self.entries):
            if e.index != self.offset + 1 + pos:
                raise LogError(f"entries are not contiguous after {self.offset}: index {e.index}")
        self.committed = min(max(committed, self.offset), self.last_index)
        self.applied = self.offset
        self.stable_last = self.last_index
        self.pending_snapshot: Snapshot | None = None

    @property
    def last_index(self) -> int:
        """Index of the last entry (the snapshot's index if there is none)."""
        return self.offset + len(self.entries)

    @property
    def last_term(self) -> int:
        """Term of the last entry."""
        return self.entries[-1].term if self.entries else self.offset_term

    def term(self, index: int) -> int | None:
        """Term of `index`, or None if compacted away or beyond the end."""
        if index == self.offset:
            return self.offset_term
        if self.offset < index <= self.last_index:
            return self.entries[index - self.offset - 1].term
        return None

    def entry(self, index: int) -> Entry:
        """The entry at `index` (must be present)."""
        if not self.offset < index <= self.last_index:
            raise LogError(f"entry {index} is outside ({self.offset}, {self.last_index}]")
        return self.entries[index - self.offset - 1]

    def slice(self, lo: int, hi: int, max_count: int | None = None) -> list[Entry]:
        """Entries with index in [lo, hi), at most `max_count` of them."""
        lo = max(lo, self.offset + 1)
        hi = min(hi, self.last_index + 1)
        if max_count is not None:
            hi = min(hi, lo + max_count)
        if lo >= hi:
            return []
        return self.entries[lo - self.offset - 1 : hi - self.offset - 1]

    def match_term(self, index: int, term: int) -> bool:
        """Whether our entry at `index` has `term` (the AppendEntries check)."""
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Whether a candidate's log is at least as up to date as ours (§5.4.1)."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def append(self, entries: Sequence[Entry]) -> None:
        """Append entries that continue the log (the leader's own proposals)."""
        for e in entries:
            if e.index != self.last_index + 1:
                raise LogError(f"append of {e.index} does not follow {self.last_index}")
            self.entries.append(e)

    def maybe_append(
        self, prev_index: int, prev_term: int, entries: Sequence[Entry], commit: int
    ) -> tuple[int, int | None] | None:
        """Follower append: None on a mismatch at prev, else (last new index,
        index the tail was truncated from or None)."""
        if not self.match_term(prev_index, prev_term):
            return None
        truncated: int | None = None
        for pos, e in enumerate(entries):
            mine = self.term(e.index)
            if mine == e.term:
                continue
            if mine is not None:
                if e.index <= self.committed:
                    raise LogError(f"conflict at committed index {e.index}")
                truncated = e.index
                del self.entries[e.index - self.offset - 1 :]
                self.stable_last = min(self.stable_last, e.index - 1)
            self.append(entries[pos:])
            break
        last_new = prev_index + len(entries)
        self.commit_to(min(commit, last_new))
        return last_new, truncated

    def commit_to(self, index: int) -> bool:
        """Advance `committed` to `index` if that moves it forward."""
        index = min(index, self.last_index)
        if index <= self.committed:
            return False
        self.committed = index
        return True

    def unstable(self) -> list[Entry]:
        """Entries not yet handed to the driver for persistence."""
        return self.slice(self.stable_last + 1, self.last_index + 1)

    def stable_to(self, index: int, term: int) -> None:
        """The driver persisted up to (index, term); ignored if since replaced."""
        if self.term(index) == term and index > self.stable_last:
            self.stable_last = index

    def to_apply(self) -> list[Entry]:
        """Committed entries not yet applied, in order."""
        return self.slice(self.applied + 1, self.committed + 1)

    def applied_to(self, index: int) -> None:
        """The driver applied everything up to `index`."""
        self.applied = max(self.applied, min(index, self.committed))

    def compact(self, index: int, data: bytes, conf: ConfState, conf_token: int) -> Snapshot:
        """Drop entries up to `index`, keeping a snapshot of the state there."""
        if index <= self.offset:
            raise LogError(f"index {index} is already compacted (snapshot at {self.offset})")
        if index > self.applied:
            raise LogError(f"cannot compact to {index}: only {self.applied} is applied")
        term = self.term(index)
        assert term is not None  # offset < index <= applied <= last_index
        meta = SnapshotMeta(index=index, term=term, conf=conf, conf_token=conf_token)
        self.snapshot = Snapshot(meta=meta, data=data)
        del self.entries[: index - self.offset]
        self.offset, self.offset_term = index, term
        return self.snapshot

    def restore(self, snapshot: Snapshot) -> None:
        """Restart the log after a snapshot received from the leader."""
        self.snapshot = snapshot
        self.pending_snapshot = snapshot
        self.entries = []
        self.offset, self.offset_term = snapshot.meta.index, snapshot.meta.term
        self.committed = self.applied = self.stable_last = snapshot.meta.index
