"""Pure rules the invariant checker applies: quorums, the configuration chain,
log agreement. No state: each takes what it judges and returns a verdict.

The quorum test and the configuration chain are the raft audit checker's own
(checkers/raft_conf.py): one implementation of R5's majority and R6's chain
for both, the simulator applying them to every log, the audit checker to
what events show.
"""

from __future__ import annotations

from typing import Protocol

from checkers.raft_conf import Conf, has_majority, transition_error
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


def is_quorum(conf: ConfState, holders: set[str]) -> bool:
    """A majority of the voters, and of the old voters while joint; no learners."""
    if not has_majority(conf.peers, holders):
        return False
    return conf.old_peers is None or has_majority(conf.old_peers, holders)


def chain_error(prev: ConfState, conf: ConfState, index: int) -> str | None:
    """Why `conf` at `index` may not follow `prev`, or None if it may.

    The raft audit checker's rule (checkers.raft_conf.transition_error), on
    the voters: stable(C) -> joint(new, old=C) -> stable(new), or the
    configuration in force again; learners may change at any step.
    """
    problem = transition_error(_voter_sets(prev), _voter_sets(conf))
    if problem is None:
        return None
    return f"{problem}: {describe_conf(prev)} then {describe_conf(conf)} at {index}"


def _voter_sets(conf: ConfState) -> Conf:
    old = None if conf.old_peers is None else tuple(sorted(conf.old_peers))
    return tuple(sorted(conf.peers)), old


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
