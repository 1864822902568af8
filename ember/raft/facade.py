"""The value types of the Raft core's facade (docs/raft-api.md).

RaftConfig and PersistedState go in, Ready and Status come out, and a
ChangeTicket tracks one change_peers request until its ChangeResult.
`change_target(node)` names the configuration a change in progress is
heading to (Status gives only its stage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

from .messages import ConfState, Entry, GroupId, HardState, Message, NodeId, Snapshot

if TYPE_CHECKING:
    from .node import RawNode

Role = Literal["follower", "candidate", "leader"]

PLANTED_BUGS = frozenset(
    {
        "commit-previous-term",
        "skip-joint",
        "skip-catchup",
        "count-learners",
        "single-majority-joint",
        "ignore-vote-lease",
        "skip-check-quorum",
        "step-down-on-joint",
    }
)


class RaftConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Tunables of one Raft node; time is in ticks."""

    election_timeout_ticks: int = 10  # randomized per election in [T, 2T)
    heartbeat_ticks: int = 1
    catchup_margin: int = 1000
    # Catch-up waits that may time out (one election timeout each) and be
    # retried; the next timeout after these resets the change with ECATCHUP.
    catchup_max_retries: int = 3
    max_entries_per_append: int = 64
    max_inflight_appends: int = 4  # flow control per follower
    # Ask the voters before campaigning (Raft thesis 9.6): a node cut off from
    # the group no longer raises its term on every timeout, so healing it does
    # not depose a working leader (L2; CI5's part-7, Docker seed 7's part-4).
    pre_vote: bool = True
    planted_bugs: frozenset[str] = frozenset()  # test-only deliberate defects

    def __post_init__(self) -> None:
        unknown = sorted(set(self.planted_bugs) - PLANTED_BUGS)
        if unknown:
            raise ValueError(
                f"unknown planted bug(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(PLANTED_BUGS))}"
            )
        for name in (
            "election_timeout_ticks",
            "heartbeat_ticks",
            "max_entries_per_append",
            "max_inflight_appends",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"RaftConfig.{name} must be at least 1")
        if self.catchup_margin < 0 or self.catchup_max_retries < 0:
            raise ValueError("RaftConfig.catchup_margin and catchup_max_retries must be >= 0")
        if self.heartbeat_ticks >= self.election_timeout_ticks:
            raise ValueError("RaftConfig.heartbeat_ticks must be below election_timeout_ticks")


class PersistedState(msgspec.Struct, kw_only=True):
    """What a restarting node read back from durable storage."""

    hard_state: HardState
    snapshot: Snapshot | None
    entries: list[Entry]  # after the snapshot, contiguous


class ChangeResult(msgspec.Struct):
    """The outcome of one change_peers request (also its ticket's result)."""

    ticket: int
    ok: bool
    status: str | None  # "ECATCHUP", "EPERM", "ESTOP", None (reset by step-down)
    reason: str
    token: int


class ChangeTicket(msgspec.Struct, kw_only=True):
    """Handle on an accepted change_peers request; `result` is set when it ends."""

    id: int
    token: int
    peers: tuple[NodeId, ...]
    learners: tuple[NodeId, ...]
    result: ChangeResult | None = None

    @property
    def done(self) -> bool:
        """Whether the change finished, either way."""
        return self.result is not None


class Ready(msgspec.Struct):
    """One batch of work for the driver: persist, send, apply, record, advance."""

    messages: list[Message]
    entries: list[Entry]  # append durably; an existing index truncates from there
    hard_state: HardState | None  # None if unchanged
    snapshot: Snapshot | None  # install before applying; durable log restarts after it
    committed_entries: list[Entry]  # apply in order
    events: list[dict[str, Any]]  # audit events without node/mono_ns/wall
    change_results: list[ChangeResult]


class Status(msgspec.Struct, kw_only=True):
    """A snapshot of a node's state for drivers, tests and the admin API."""

    id: NodeId
    group: GroupId
    role: Role
    term: int
    leader: NodeId | None
    commit: int
    applied: int
    last_index: int
    conf: ConfState
    stage: str  # "none" / "catching-up" / "joint" / "stable"
    token: int  # of the configuration in force
    progress: dict[NodeId, int]  # leader only: {peer: match_index}


def change_target(node: RawNode) -> ConfState | None:
    """The target configuration of the membership change `node` is driving.

    None when no change is in progress, which includes every non-leader (only
    a leader drives a change) and a new leader whose inherited configuration
    is not committed yet (Status.stage "stable", with no target of its own).
    Read-only; it lets a driver tell which change a stage belongs to (e.g. a
    rebalance cancel checks the change in flight is the one it names) without
    the core's internals.
    """
    ctx = node._ctx  # inside the core package: drivers outside it call this instead
    return ctx.target if ctx is not None else None
