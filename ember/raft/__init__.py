"""ember's sans-IO Raft core: the public facade (see docs/raft-api.md).

Drivers import everything from here; the modules behind it are private to
the package and may change.
"""

from .errors import (
    ChangeBusy,
    InvalidConfig,
    LogError,
    NotLeader,
    RaftError,
    StaleToken,
    WrongTerm,
)
from .facade import (
    PLANTED_BUGS,
    ChangeResult,
    ChangeTicket,
    PersistedState,
    RaftConfig,
    Ready,
    Status,
)
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    ConfState,
    Entry,
    GroupId,
    HardState,
    InstallSnapshot,
    InstallSnapshotResp,
    Message,
    NodeId,
    RequestVote,
    RequestVoteResp,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
)
from .node import RawNode

__all__ = [
    "PLANTED_BUGS",
    "AppendEntries",
    "AppendEntriesResp",
    "ChangeBusy",
    "ChangeResult",
    "ChangeTicket",
    "ConfState",
    "Entry",
    "GroupId",
    "HardState",
    "InstallSnapshot",
    "InstallSnapshotResp",
    "InvalidConfig",
    "LogError",
    "Message",
    "NodeId",
    "NotLeader",
    "PersistedState",
    "RaftConfig",
    "RaftError",
    "RawNode",
    "Ready",
    "RequestVote",
    "RequestVoteResp",
    "Snapshot",
    "SnapshotMeta",
    "StaleToken",
    "Status",
    "TimeoutNow",
    "WrongTerm",
]
