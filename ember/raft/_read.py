"""ReadIndex: linearizable reads without a log entry (Raft thesis, 6.4).

A read asks the leader for its commit index, the *read index*, and waits
until the leader has proven that it was still the leader after the read
arrived: it sends every voter a heartbeat carrying the read's context (a
number that only grows), and a (joint) quorum answering at the leader's term
with that context or a later one proves that no other leader could have
committed anything the read index misses. The driver then serves the read
from its state machine once it has applied up to the read index.

- A leader that has not committed an entry of its own term yet does not
  know the true commit index (Raft §8), so it refuses reads (NotLeader with
  itself as the leader: "retry shortly") until its no-op commits.
- Only the leader reads: a follower, a learner or a replica still catching
  up is never leader, so it never serves one.
- Reads still waiting for their quorum are forgotten when the node leaves
  the leader role (any role change); the driver sees the term or role
  change and fails them. A read already confirmed stays valid: the leader
  was the leader after the read began, which is all linearizability needs.
- Heartbeats of ticks carry context 0 and confirm nothing; learners are not
  asked (their answers would not count).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _leader as lead
from . import quorum
from .errors import NotLeader
from .messages import NodeId

if TYPE_CHECKING:
    from .node import RawNode


def read_index(n: RawNode) -> int:
    """Start a read at the current commit index; returns its context."""
    n._require_leader()
    if n.log.term(n.log.committed) != n.term:
        raise NotLeader(f"{n.id} has not committed an entry in term {n.term} yet", n.id)
    n._read_seq += 1
    ctx = n._read_seq
    n._reads_pending.append((ctx, n.log.committed))
    for peer in sorted(quorum.voters(n.conf) - {n.id}):
        if peer in n._prs:
            lead.send_heartbeat(n, peer, read_ctx=ctx)
    confirm(n)
    return ctx


def on_ack(n: RawNode, peer: NodeId, ctx: int) -> None:
    """Leader: `peer` answered a heartbeat of read context `ctx` at our term."""
    if ctx > n._read_acks.get(peer, 0):
        n._read_acks[peer] = ctx
        confirm(n)


def confirm(n: RawNode) -> None:
    """Move every read a quorum has confirmed to the ready list, in order."""
    conf = n._vote_conf()
    while n._reads_pending:
        ctx, index = n._reads_pending[0]
        votes = {p: True for p, acked in n._read_acks.items() if acked >= ctx}
        votes[n.id] = True
        if quorum.joint_vote(conf, votes) != "won":
            return
        n._reads_pending.pop(0)
        n._reads_ready.append((ctx, index))


def forget_pending(n: RawNode) -> None:
    """A role change: reads not yet confirmed can no longer be."""
    n._reads_pending.clear()
    n._read_acks.clear()
