"""ember's durable storage: Raft logs, hard states and snapshots of every group.

    store = NodeStorage(data_dir)          # recovers; StorageCorruption if damaged
    g = store.group("g1")
    state = g.load()                       # PersistedState for RawNode(persisted=...)
    g.save(rd.entries, rd.hard_state, rd.snapshot)   # for each group's Ready
    store.commit()                         # one write + one fdatasync for all groups
    # only now send rd.messages and advance

See `node.py` for the design and `bench/storage.py` for why it is a log of
our own rather than SQLite or LMDB.
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
