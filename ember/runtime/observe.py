"""The runtime's observer seam: who may watch every group's Readies as they happen.

The node loop tells each registered `RaftObserver`, per node and group, what
an omniscient checker needs and nothing else: a group started from its store
(`on_start`), a Ready taken and about to be staged (`on_write`), that Ready
made durable (`on_durable`: the round's `NodeStorage.commit` has completed,
and the Ready's messages are about to go out), each entry applied to the
state machine (`on_applied`) and the group's status after a round
(`on_status`). A node killed before its commit completes tells nothing more;
its restart's `on_start` shows what its store kept. The list is empty in the
daemon, so the loop pays one emptiness test per round; the simulator
installs its invariant checker here for a run (ember.sim.omniscient), as it
taps the audit log.

An observer must not change what it is shown: the Ready and the entries are
the node's own objects.
"""

from __future__ import annotations

from typing import Protocol

from ember.raft import Entry, GroupId, NodeId, PersistedState, Ready, Status


class RaftObserver(Protocol):
    """What the node loop reports to an observer (see the module doc)."""

    def on_start(self, node: NodeId, group: GroupId, state: PersistedState) -> None:
        """The group's replica starts on `node` from this durable state."""

    def on_write(self, node: NodeId, group: GroupId, rd: Ready, status: Status) -> None:
        """A Ready was taken (`status`: the group's state then); it is not yet durable."""

    def on_durable(self, node: NodeId, group: GroupId, rd: Ready) -> None:
        """The Ready's writes are durable; its messages are about to go out."""

    def on_applied(self, node: NodeId, group: GroupId, entry: Entry) -> None:
        """`entry` was applied to the group's state machine on `node`."""

    def on_status(self, node: NodeId, group: GroupId, status: Status) -> None:
        """The group's state on `node` after a round."""


# Empty in the daemon; a simulation appends its checker for the run and removes it after.
OBSERVERS: list[RaftObserver] = []
