"""Wire and storage types of the Raft core.

These structs are the contract between the sans-IO core (`ember/raft`), its
drivers (the simulator in `ember/sim`, the asyncio runtime in `ember/net` and
`ember/storage`) and the audit checkers. They are msgspec Structs so the
transport can frame them as msgpack with no hand-written codec: every message
is a tagged struct and `Message` is their union.

Every message names its Raft group: many groups share one connection per node
pair, and the receiving node routes by `group`.
"""

from __future__ import annotations

from typing import Literal

import msgspec

NodeId = str
GroupId = str


class ConfState(msgspec.Struct, frozen=True, kw_only=True):
    """A configuration: voters, the old voters while joint, and learners.

    `old_peers` is None in a stable configuration; in a joint one, decisions
    need a majority of `peers` AND a majority of `old_peers`. Learners never
    count in any majority.
    """

    peers: tuple[NodeId, ...]
    old_peers: tuple[NodeId, ...] | None = None
    learners: tuple[NodeId, ...] = ()

    @property
    def is_joint(self) -> bool:
        return self.old_peers is not None


EntryKind = Literal["normal", "config", "noop"]


class Entry(msgspec.Struct, frozen=True, kw_only=True):
    """One log entry. `conf` and `token` are set only on configuration entries."""

    term: int
    index: int
    kind: EntryKind = "normal"
    data: bytes = b""
    conf: ConfState | None = None
    # The change request's token (the rebalance revision later on).
    token: int = 0


class HardState(msgspec.Struct, frozen=True, kw_only=True):
    """What must be durable before any message that depends on it is sent."""

    term: int = 0
    vote: NodeId | None = None
    commit: int = 0


class SnapshotMeta(msgspec.Struct, frozen=True, kw_only=True):
    index: int
    term: int
    conf: ConfState
    # Token of the configuration entry that `conf` came from.
    conf_token: int = 0


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    meta: SnapshotMeta
    data: bytes = b""


class _Msg(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    group: GroupId
    src: NodeId
    dst: NodeId
    term: int


class AppendEntries(_Msg, frozen=True, kw_only=True):
    """Entries after (prev_index, prev_term); empty entries is a heartbeat."""

    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    # A ReadIndex heartbeat's context, echoed in the answer (0: none).
    read_ctx: int = 0
    # False on a heartbeat that only announces a commit to a peer streaming
    # entries: a successful one is not answered (ember/raft/_leader.py).
    answer: bool = True


class AppendEntriesResp(_Msg, frozen=True, kw_only=True):
    """`match_index` on success; on rejection `reject_hint` is where to retry."""

    success: bool
    match_index: int = 0
    reject_hint: int = 0
    last_index: int = 0
    read_ctx: int = 0  # echoes the append's


class RequestVote(_Msg, frozen=True, kw_only=True):
    """`force` is set by a TimeoutNow-triggered election: it bypasses the
    leader-lease check that makes voters ignore disruptive candidates.

    `pre` marks a Pre-Vote (Raft thesis 9.6): `term` is the term the sender
    WOULD campaign in; neither side changes its term or vote for it."""

    last_index: int
    last_term: int
    force: bool = False
    pre: bool = False


class RequestVoteResp(_Msg, frozen=True, kw_only=True):
    """A granted Pre-Vote answer carries the asked term; a refused one the
    voter's own, so a sender behind on terms learns where the group is."""

    granted: bool
    pre: bool = False


class InstallSnapshot(_Msg, frozen=True, kw_only=True):
    snapshot: Snapshot


class InstallSnapshotResp(_Msg, frozen=True, kw_only=True):
    index: int
    success: bool


class TimeoutNow(_Msg, frozen=True, kw_only=True):
    """Tells the receiver to start an election at once (leader transfer and
    the waking-up optimisation after a removed leader steps down)."""


Message = (
    AppendEntries
    | AppendEntriesResp
    | RequestVote
    | RequestVoteResp
    | InstallSnapshot
    | InstallSnapshotResp
    | TimeoutNow
)
