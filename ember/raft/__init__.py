"""ember's sans-IO Raft core: the public facade (see docs/raft-api.md).

Drivers import everything from here; the modules behind it are private to
the package and may change.

Behaviour a driver should know beyond docs/raft-api.md:
- `compact(index, data)` returns the Snapshot it made, for the driver to
  persist; it never appears in a Ready (the app already has that state).
- The bootstrap configuration is in no log entry. Persist it as the empty
  snapshot at index 0 (or pass `conf` again on restart). A leader sends it
  as an InstallSnapshot at index 0 to a peer that it would otherwise feed
  from index 1 and that was not a bootstrap member, so Ready.snapshot may
  be that empty index-0 snapshot.
- Change tokens: a token below the configuration in force's is StaleToken;
  an equal one is accepted (a retry of the same request after ECATCHUP).
- ChangeTicket carries `id`, `token`, `peers`, `learners` and, once it ends,
  `result`; InvalidConfig (bad peer sets, transfer to a non-voter) and
  LogError (an internal invariant) are RaftErrors too.
- On rejection, AppendEntriesResp.match_index echoes the rejected
  prev_index (so the leader can drop stale rejections).
- `describe` prints messages, entries, events and status in one line each.
- ReadIndex (`_read`): `read_index()` on a leader that committed an entry in
  its term returns a context; `take_reads()` later hands out (context, read
  index) once a quorum answered that context's heartbeat at the leader's
  term. Serve the read when applied >= read index. Pending reads are dropped
  on any role change (the driver fails them); AppendEntries and its answer
  carry `read_ctx` (0 for ordinary appends and tick heartbeats).
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
