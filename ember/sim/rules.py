"""Pure rules the invariant checker applies: quorums, the configuration chain,
log agreement. No state: each takes what it judges and returns a verdict.
"""

from __future__ import annotations

from typing import Protocol

from ember.raft import ConfState, Entry, Snapshot


class Log(Protocol):
    """What `match_index` reads of a log (ember.sim.logview.LogView)."""

    @property
    def snapshot(self) -> Snapshot | None: ...

    @property
    def snap_index(self) -> int: ...

    @property
    def last_index(self) -> int: ...

    def term_at(self, index: int) -> int | None: ...


def has_majority(nodes: tuple[str, ...], holders: set[str]) -> bool:
    """Whether more than half of `nodes` are in `holders`."""
    return sum(1 for n in nodes if n in holders) * 2 > len(nodes)


def is_quorum(conf: ConfState, holders: set[str]) -> bool:
    """A majority of the voters, and of the old voters while joint; no learners."""
    if not has_majority(conf.peers, holders):
        return False
    return conf.old_peers is None or has_majority(conf.old_peers, holders)


def chain_error(prev: ConfState, conf: ConfState, index: int) -> str | None:
    """Why `conf` at `index` may not follow `prev`, or None if it may.

    stable(C) -> joint(new, old=C) -> stable(new); learners may change at any
    step, and a joint entry may keep the same voters (a learner-only change).
    """
    if prev.is_joint:
        if conf.is_joint or conf.peers != prev.peers:
            return (
                f"after joint {describe_conf(prev)} comes {describe_conf(conf)} at {index}; "
                "expected stable(new)"
            )
    elif conf.is_joint:
        if conf.old_peers != prev.peers:
            return (
                f"joint {describe_conf(conf)} at {index} does not start from {describe_conf(prev)}"
            )
    elif conf.peers != prev.peers:
        return (
            f"stable {describe_conf(prev)} -> stable {describe_conf(conf)} at {index}: "
            "no joint stage"
        )
    return None


def match_index(peer: Log, leader: Log, upto: int) -> int:
    """The highest index <= upto where `peer` agrees with `leader`."""
    index = min(peer.last_index, upto)
    while index > peer.snap_index:
        if peer.term_at(index) == leader.term_at(index):
            return index
        index -= 1
    return peer.snap_index if peer.snapshot is not None else 0


def describe_conf(conf: ConfState) -> str:
    """peers=[..] old=[..] learners=[..], for messages."""
    text = f"peers={list(conf.peers)}"
    if conf.old_peers is not None:
        text += f" old={list(conf.old_peers)}"
    if conf.learners:
        text += f" learners={list(conf.learners)}"
    return text


def describe_entry(entry: Entry) -> str:
    """(term, kind, data prefix), for messages."""
    return f"(term {entry.term}, {entry.kind}, {entry.data[:20]!r})"
