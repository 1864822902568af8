"""ember's durable storage: Raft logs, hard states and snapshots of every group.

    store = NodeStorage(data_dir)          # recovers; StorageCorruption if damaged
    g = store.group("g1")
    state = g.load()                       # PersistedState for RawNode(persisted=...)
    g.save(rd.entries, rd.hard_state, rd.snapshot)   # for each group's Ready
    store.commit()                         # one write + one fdatasync for all groups
    # only now send rd.messages and advance

    # Bootstrap: record a new group's initial configuration as the empty
    # snapshot at index 0, so a restart needs nothing but the store.
    g.save(snapshot=Snapshot(meta=SnapshotMeta(index=0, term=0, conf=conf)))
    # Local compaction: after raw.compact(index, data), persist the snapshot
    # the core made; entries after it stay (its last term matches the log).
    g.save(snapshot=raw.log.snapshot)

Inspect a stopped or crashed node's store, read-only: `python -m ember.storage DIR`.

See `node.py` for the design. Why a log of our own rather than SQLite (WAL,
synchronous=FULL) or LMDB, measured with `bench/storage.py` on the 2-core
dev VM (128-byte entries over 8 groups; medians of 3; the disk's fsync rate
swung from ~4,000/s idle to ~250/s while five other jobs shared it):

- Durable throughput is fsync-bound and equal at batch 1 (all three within
  noise, 1-5k commits/s idle); at batch 128 ours appended 1.4-3x SQLite's and
  1.6-2x LMDB's entries/s (idle: 255k vs 85k vs 150k).
- CPU per commit, with fsync off (`--no-sync`), is what a 2-core node can
  spare: ours ~16-20 us per commit at batch 1 and ~3 us per entry at 128;
  SQLite 66-80 us and ~12 us; LMDB close to ours.
- Only a log of our own meets the recovery contract directly: SQLite drops a
  torn WAL frame silently and finds mid-file damage only on a query or a
  full integrity check; LMDB keeps no checksums. Ours checks every record at
  open, truncates a torn tail with a warning and names the file and byte
  offset of any other damage. It needs no new dependency.
"""

from ember.raft import PersistedState
from ember.storage.group_log import GroupOps
from ember.storage.node import GroupStorage, NodeStorage, StorageStats
from ember.storage.records import StorageCorruption

__all__ = [
    "GroupOps",
    "GroupStorage",
    "NodeStorage",
    "PersistedState",
    "StorageCorruption",
    "StorageStats",
]
