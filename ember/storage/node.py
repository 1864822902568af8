"""A node's durable store for all its Raft groups: one write-ahead log.

Theory of operation
-------------------
Every group on a node shares one log, so a node-wide `commit()` makes the
writes of every group durable with ONE fsync: that batching is what lets a
node on two cores sustain thousands of writes per second. The log lives in
`data_dir` as segment files `wal-<generation>.log`:

- A segment opens with a *base* record holding the full image of every group
  (hard state, snapshot, entries after it); the records after it are
  *batches*, one per `commit()`, each listing the `GroupOps` of that commit.
  Every record carries a sequence number one above its predecessor's.
- Memory holds the current image of every group (`GroupLog`); `save()`
  checks a write against it, applies it, and queues it; `commit()` frames the
  queue as one record, writes it and fdatasyncs before returning. Only then
  may the caller act on the write (send messages, acknowledge clients).
- When a segment outgrows `max(segment_bytes, 2 x its base record)`, commit
  writes the current image as the base of a new segment into a temporary
  file, fsyncs it, renames it into place, fsyncs the directory, and deletes
  the old segment. A crash at any step leaves either the old segment (still
  complete) or the new one; recovery takes the newest and deletes the rest.
  Write amplification from these rewrites stays bounded by the 2x rule.
- Recovery replays the newest segment. A torn last record (see `records`) is
  truncated with a warning; damage that valid records follow raises
  `StorageCorruption` naming the file and byte offset.

A save/commit cycle is single-threaded: `commit()` may run in a worker thread
(it blocks on fsync) but no `save()` may run while it does; the node's loop
persists a Ready, awaits the commit, then sends, which gives exactly that.
An I/O error during commit poisons the store: after a failed fsync the page
cache can no longer be trusted (the "fsyncgate" lesson), so every later call
raises and the node must restart and recover from disk.
"""

from __future__ import annotations

import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ember.raft import PersistedState
from ember.raft.messages import Entry, GroupId, HardState, Snapshot
from ember.storage.group_log import GroupLog, GroupOps
from ember.storage.records import frame
from ember.storage.segment import Record, encoder, list_segments, replay_segment, segment_name

log = logging.getLogger(__name__)

_TMP_SUFFIX = ".tmp"
DEFAULT_SEGMENT_BYTES = 64 << 20


@dataclass(slots=True)
class StorageStats:
    """Counters for benchmarks and the node's status page."""

    commits: int = 0
    fsyncs: int = 0
    bytes_written: int = 0
    rotations: int = 0
    torn_bytes_dropped: int = 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class GroupStorage:
    """One group's view of the node store; writes become durable on commit."""

    def __init__(self, node: NodeStorage, group: GroupId) -> None:
        self._node = node
        self.group = group

    def load(self) -> PersistedState:
        """The group's state (including staged writes) as the Raft core restarts from."""
        return self._node._group_log(self.group).persisted()

    def save(
        self,
        entries: list[Entry] | tuple[Entry, ...] = (),
        hard_state: HardState | None = None,
        snapshot: Snapshot | None = None,
    ) -> None:
        """Stage a Ready's writes (snapshot, then entries, then hard state).

        An entry at an index the log holds truncates the log from there. A
        snapshot drops the entries it covers and keeps those after it if the
        log holds its last entry with the same term (local compaction), else
        drops the whole log (an installed snapshot). Raises ValueError for a
        write that would leave a hole in the log or move the snapshot back.
        Nothing is durable until `NodeStorage.commit()` returns.
        """
        ops = GroupOps(
            group=self.group, snapshot=snapshot, entries=tuple(entries), hard_state=hard_state
        )
        self._node._stage(ops)

    @property
    def last_index(self) -> int:
        """Index of the last entry held (staged writes included)."""
        return self._node._group_log(self.group).last_index


class NodeStorage:
    """All groups' durable state on one node, in one write-ahead log."""

    def __init__(self, data_dir: str | os.PathLike[str], *, segment_bytes: int = 0) -> None:
        """Open (creating if needed) and recover the store in `data_dir`.

        Raises StorageCorruption if acknowledged data is damaged, and
        BlockingIOError if another process has the store open.
        """
        self.path = Path(data_dir)
        self.segment_bytes = segment_bytes or DEFAULT_SEGMENT_BYTES
        self.stats = StorageStats()
        self._groups: dict[GroupId, GroupLog] = {}
        self._pending: list[GroupOps] = []
        self._committing = False
        self._failed: BaseException | None = None
        if not self.path.is_dir():
            self.path.mkdir(parents=True)
            # The directory's own entry must survive a power cut too.
            _fsync_dir(self.path.parent)
        self._lock_fd = os.open(self.path / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise BlockingIOError(
                f"{self.path}: store is already open in another process"
            ) from None
        self._fd = -1
        self._seq = 0
        self._generation = 0
        self._size = 0
        self._base_size = 0
        try:
            self._recover()
        except BaseException:
            self.close()
            raise

    # -- public API ---------------------------------------------------------

    def group(self, group_id: GroupId) -> GroupStorage:
        """The storage handle of one group (created empty on first use)."""
        return GroupStorage(self, group_id)

    def groups(self) -> list[GroupId]:
        """Ids of the groups that have state on this node."""
        return sorted(self._groups)

    def remove_group(self, group_id: GroupId) -> None:
        """Stage forgetting a group that left this node."""
        self._stage(GroupOps(group=group_id, drop=True))

    @property
    def has_pending(self) -> bool:
        """Whether staged writes await a commit."""
        return bool(self._pending)

    def commit(self) -> int:
        """Make every staged write durable with one write and one fdatasync.

        Returns how many group changes were committed (0: nothing staged, no
        fsync). Blocks on the disk; may run in a worker thread.
        """
        self._check_usable()
        if not self._pending:
            return 0
        # Flag first: a save() from another thread from here on must fail, or
        # a rotation's base image could hold writes this batch does not.
        self._committing = True
        batch, self._pending = self._pending, []
        try:
            self._seq += 1
            data = frame(encoder.encode(Record(seq=self._seq, base=False, groups=tuple(batch))))
            _write_all(self._fd, data)
            os.fdatasync(self._fd)
            self._size += len(data)
            self.stats.commits += 1
            self.stats.fsyncs += 1
            self.stats.bytes_written += len(data)
            if self._size > max(self.segment_bytes, 2 * self._base_size):
                self._rotate()
        except BaseException as exc:
            self._failed = exc
            raise
        finally:
            self._committing = False
        return len(batch)

    def close(self) -> None:
        """Release the files; staged but uncommitted writes are discarded."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> NodeStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- staging ------------------------------------------------------------

    def _group_log(self, group: GroupId) -> GroupLog:
        found = self._groups.get(group)
        return found if found is not None else GroupLog()

    def _stage(self, ops: GroupOps) -> None:
        self._check_usable()
        if self._committing:
            raise RuntimeError("save() while commit() runs: persist a Ready, then commit")
        if ops.drop:
            self._groups.pop(ops.group, None)
        else:
            state = self._groups.get(ops.group) or GroupLog()
            state.check(ops)
            state.apply(ops)
            self._groups[ops.group] = state
        self._pending.append(ops)

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise RuntimeError(
                f"{self.path}: store unusable after an I/O error ({self._failed!r}); "
                "restart the node to recover from disk"
            )
        if self._fd < 0:
            raise RuntimeError(f"{self.path}: store is closed")

    # -- recovery and rotation ---------------------------------------------

    def _recover(self) -> None:
        for entry in os.scandir(self.path):
            if entry.name.endswith(_TMP_SUFFIX):
                # A rotation that died before its rename: the old segment stands.
                os.unlink(entry.path)
        segments = list_segments(self.path)
        if not segments:
            self._write_new_segment()
            return
        self._generation, newest = segments[-1]
        self._replay(newest)
        for _, old in segments[:-1]:
            # Superseded by a newer base that was fsynced and renamed in place.
            os.unlink(old)
        self._fd = os.open(newest, os.O_WRONLY | os.O_APPEND)

    def _replay(self, path: Path) -> None:
        replayed = replay_segment(path)
        self._groups = replayed.groups
        self._seq = replayed.seq
        self._base_size = replayed.base_size
        self._size = replayed.size
        torn = replayed.torn
        if torn is not None:
            log.warning(
                "%s: torn tail at byte offset %d (%s): dropping %d bytes never acknowledged",
                path,
                torn.offset,
                torn.reason,
                torn.dropped_bytes,
            )
            with open(path, "r+b") as fh:
                fh.truncate(torn.offset)
                os.fsync(fh.fileno())
            self.stats.torn_bytes_dropped += torn.dropped_bytes

    def _write_new_segment(self) -> None:
        """Write the current image as the base of the next segment, atomically."""
        generation = self._generation + 1
        final = self.path / segment_name(generation)
        tmp = final.with_name(final.name + _TMP_SUFFIX)
        self._seq += 1
        image = tuple(state.image(group) for group, state in sorted(self._groups.items()))
        data = frame(encoder.encode(Record(seq=self._seq, base=True, groups=image)))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        _fsync_dir(self.path)
        old_fd, old_generation = self._fd, self._generation
        self._fd = os.open(final, os.O_WRONLY | os.O_APPEND)
        self._generation = generation
        self._size = self._base_size = len(data)
        self.stats.fsyncs += 2
        self.stats.bytes_written += len(data)
        if old_fd >= 0:
            os.close(old_fd)
            os.unlink(self.path / segment_name(old_generation))

    def _rotate(self) -> None:
        self._write_new_segment()
        self.stats.rotations += 1
