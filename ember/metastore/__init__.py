"""ember's metastore: a revisioned key-value store on its own Raft group.

`state` is the pure revisioned map (revisions, invoke, past reads, watch
history, compaction); `machine` replicates it as the `meta` group's state
machine. The node serves it over HTTP (`/meta/...`, see ember.api).
"""

from ember.metastore.machine import MetastoreMachine, encode, execute
from ember.metastore.state import (
    Compacted,
    Event,
    MetaState,
    MetastoreError,
    Record,
    invoke_branches,
    record_json,
)

META_GROUP = "meta"

__all__ = [
    "META_GROUP",
    "Compacted",
    "Event",
    "MetaState",
    "MetastoreError",
    "MetastoreMachine",
    "Record",
    "encode",
    "execute",
    "invoke_branches",
    "record_json",
]
