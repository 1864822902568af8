"""Configurations as the Raft checker sees them, and one node's view of one group.

A configuration is (peers, old_peers): old_peers is None for a stable
configuration and the outgoing voters for a joint one. `transition_error`
is the legal-step rule the checker applies to appended and committed
configuration entries: stable(old) -> joint(new, old) -> stable(new).
"""

from __future__ import annotations

from typing import Any

import msgspec

Conf = tuple[tuple[str, ...], tuple[str, ...] | None]  # (peers, old_peers or None)


def conf_of(ev: dict[str, Any]) -> Conf:
    old = ev.get("old_peers")
    return tuple(sorted(ev.get("peers") or ())), (None if old is None else tuple(sorted(old)))


def voters(conf: Conf) -> set[str]:
    """Every voter of `conf`: its peers, and its old peers while joint."""
    return set(conf[0]) | set(conf[1] or ())


def has_majority(members: tuple[str, ...] | list[str], holders: set[str]) -> bool:
    """Whether more than half of `members` are in `holders` (R5's quorum test,
    shared with the simulator's omniscient checker)."""
    return sum(1 for n in members if n in holders) * 2 > len(members)


def describe(conf: Conf) -> str:
    peers, old = conf
    return f"stable{list(peers)}" if old is None else f"joint{list(peers)}<-{list(old)}"


def transition_error(prev: Conf, new: Conf) -> str | None:
    """Why prev -> new is not a legal configuration step, or None if it is."""
    if new == prev:
        return None
    (prev_peers, prev_old), (new_peers, new_old) = prev, new
    if prev_old is None and new_old == prev_peers:
        return None  # stable(old) -> joint(new, old)
    if prev_old is not None and new_old is None and new_peers == prev_peers:
        return None  # joint(new, old) -> stable(new)
    if prev_old is None and new_old is None:
        return "joint-skipped"
    return "bad-config-transition"


class NodeGroup(msgspec.Struct):
    """What one node knows about one group, as its events replay."""

    role: str = "follower"
    term: int = 0
    applied: Conf | None = None  # the configuration in force (ember applies on append)
    previous: Conf | None = None  # the one before it, where the node may still campaign
    applied_index: int = 0  # the log index of its entry
    committed_index: int = 0  # highest config entry (or snapshot) known committed
    caught_up: set[str] = msgspec.field(default_factory=set)
    margins: dict[str, int] = msgspec.field(default_factory=dict)
    must_step_down: dict[str, Any] | None = None
    timeout_now: dict[str, Any] | None = None  # a TimeoutNow the next campaign acts on
