"""ember's user table: get / put / cas / delete on keys hashed to partitions.

Each partition is a Raft group `part-<i>`; see `table` for how operations
stay linearizable and `statemachine` for what a partition replicates.
"""

from ember.kv.statemachine import Command, KvState, PartitionMachine, apply_command
from ember.kv.table import (
    DEFAULT_PARTITIONS,
    KvTable,
    NotProposed,
    ResultUnknown,
    make_machines,
    partition_of,
)

__all__ = [
    "DEFAULT_PARTITIONS",
    "Command",
    "KvState",
    "KvTable",
    "NotProposed",
    "PartitionMachine",
    "ResultUnknown",
    "apply_command",
    "make_machines",
    "partition_of",
]
