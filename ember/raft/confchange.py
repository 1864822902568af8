"""Pure configuration changes: copy the input, check, change, check the output.

A leader moves from a stable configuration C(old) to C(new) through the joint
configuration C(old, new) (`enter_joint`), then to C(new) alone
(`leave_joint`). Both functions build a new frozen ConfState and check the
invariants on it before returning, so a bad request fails here with an
`InvalidConfig` naming the problem instead of reaching the log.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import InvalidConfig
from .messages import ConfState, NodeId


def normalize(nodes: Iterable[NodeId], what: str) -> tuple[NodeId, ...]:
    """Sorted tuple of `nodes`; duplicates are an error naming `what`."""
    items = list(nodes)
    if any(not isinstance(n, str) or not n for n in items):
        raise InvalidConfig(f"{what} must be non-empty node id strings, got {items!r}")
    dups = sorted({n for n in items if items.count(n) > 1})
    if dups:
        raise InvalidConfig(f"{what} lists {', '.join(dups)} more than once")
    return tuple(sorted(items))


def check(conf: ConfState) -> ConfState:
    """Return `conf` if it is well formed, else raise InvalidConfig saying why."""
    if not conf.peers:
        raise InvalidConfig("a configuration needs at least one voter")
    if conf.old_peers is not None and not conf.old_peers:
        raise InvalidConfig("a joint configuration needs at least one old voter")
    both = sorted(set(conf.peers) & set(conf.learners))
    if both:
        raise InvalidConfig(f"{', '.join(both)} cannot be both voter and learner")
    for part in (conf.peers, conf.old_peers or (), conf.learners):
        if tuple(sorted(set(part))) != part:
            raise InvalidConfig(f"peer sets must be sorted and unique, got {part!r}")
    return conf


def stable(peers: Iterable[NodeId], learners: Iterable[NodeId] = ()) -> ConfState:
    """A stable configuration of `peers` and `learners`, checked."""
    return check(
        ConfState(peers=normalize(peers, "peers"), learners=normalize(learners, "learners"))
    )


def enter_joint(current: ConfState, target: ConfState) -> ConfState:
    """C(old, new): the target's voters and learners with current's voters as old."""
    check(current)
    check(target)
    if current.is_joint:
        raise InvalidConfig("cannot enter a joint configuration from a joint one")
    if target.is_joint:
        raise InvalidConfig("the target configuration must be stable")
    return check(ConfState(peers=target.peers, old_peers=current.peers, learners=target.learners))


def leave_joint(current: ConfState) -> ConfState:
    """C(new) from C(old, new): drop the old voters, keep learners."""
    check(current)
    if not current.is_joint:
        raise InvalidConfig("cannot leave a joint configuration: not in one")
    return check(ConfState(peers=current.peers, learners=current.learners))


def same_members(a: ConfState, b: ConfState) -> bool:
    """Whether two configurations have the same voters, old voters and learners."""
    return (a.peers, a.old_peers, a.learners) == (b.peers, b.old_peers, b.learners)
