"""Majority and joint-majority math, pure and separate from the node.

A stable configuration decides with a majority of its voters; a joint one
needs a majority of the new voters AND a majority of the old voters. Learners
are never passed in here: callers hand over voter sets only, which is what
keeps learners out of every majority.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

from .messages import ConfState, NodeId

VoteResult = Literal["won", "lost", "pending"]

# An empty voter set agrees to anything, so that in a joint decision an
# absent half never limits the other (as in etcd's quorum package).
UNBOUNDED = 1 << 62


def majority_committed(voters: Collection[NodeId], match: Mapping[NodeId, int]) -> int:
    """The largest index that a majority of `voters` has matched."""
    if not voters:
        return UNBOUNDED
    acked = sorted((match.get(v, 0) for v in voters), reverse=True)
    return acked[len(acked) // 2]


def joint_committed(conf: ConfState, match: Mapping[NodeId, int]) -> int:
    """The largest index matched by a majority of peers and of old_peers."""
    committed = majority_committed(conf.peers, match)
    if conf.old_peers is not None:
        committed = min(committed, majority_committed(conf.old_peers, match))
    return committed


def majority_vote(voters: Collection[NodeId], votes: Mapping[NodeId, bool]) -> VoteResult:
    """Whether `votes` (granted or refused, by voter) decide an election."""
    if not voters:
        return "won"
    need = len(voters) // 2 + 1
    granted = sum(1 for v in voters if votes.get(v) is True)
    refused = sum(1 for v in voters if votes.get(v) is False)
    if granted >= need:
        return "won"
    if len(voters) - refused < need:
        return "lost"
    return "pending"


def joint_vote(conf: ConfState, votes: Mapping[NodeId, bool]) -> VoteResult:
    """An election in a joint configuration must be won in both halves."""
    new = majority_vote(conf.peers, votes)
    if conf.old_peers is None:
        return new
    old = majority_vote(conf.old_peers, votes)
    if new == "lost" or old == "lost":
        return "lost"
    if new == "won" and old == "won":
        return "won"
    return "pending"


def voters(conf: ConfState) -> frozenset[NodeId]:
    """Every node whose vote or ack counts in `conf` (both halves if joint)."""
    return frozenset(conf.peers) | frozenset(conf.old_peers or ())


def members(conf: ConfState) -> frozenset[NodeId]:
    """Every node that receives the log under `conf`: voters and learners."""
    return voters(conf) | frozenset(conf.learners)
