"""ember's node runtime: one asyncio loop driving many Raft groups.

See `node` for the loop, `group` for one group's share of it and `config`
for the node's configuration and addressing.
"""

from ember.runtime.config import ConfigError, NodeConfig, PeerAddr
from ember.runtime.group import Group, OutcomeUnknown, ProposalDropped, StateMachine
from ember.runtime.node import NodeRuntime, NodeStopping, partition_group

__all__ = [
    "ConfigError",
    "Group",
    "NodeConfig",
    "NodeRuntime",
    "NodeStopping",
    "OutcomeUnknown",
    "PeerAddr",
    "ProposalDropped",
    "StateMachine",
    "partition_group",
]
