"""Elections: timeouts, campaigns, votes, the leader lease and TimeoutNow.

A follower campaigns when its randomized timeout (from the injected RNG)
fires, if it is a voter. A voter that heard from a leader within the minimum
election timeout ignores RequestVote (the lease), unless the vote is `force`d
by a TimeoutNow. A joint configuration's election must be won in both
halves. Lower-term senders get an answer carrying our term so they step down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import quorum
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    InstallSnapshot,
    InstallSnapshotResp,
    Message,
    RequestVote,
    RequestVoteResp,
    TimeoutNow,
)

if TYPE_CHECKING:
    from .node import RawNode


def tick_election(n: RawNode) -> None:
    """One follower/candidate tick: campaign when the randomized timeout fires."""
    n._election_elapsed += 1
    if n._election_elapsed >= n._timeout:
        n._election_elapsed = 0
        n._timeout = n._random_timeout()
        if n._is_promotable():
            campaign(n, force=False)


def campaign(n: RawNode, force: bool) -> None:
    """Become candidate and ask every voter (both halves if joint) for a vote."""
    n._become_candidate()
    if quorum.joint_vote(n._vote_conf(), n._votes) == "won":
        n._become_leader()
        return
    for v in sorted(quorum.voters(n.conf) - {n.id}):
        n._msgs.append(
            RequestVote(
                group=n.group,
                src=n.id,
                dst=v,
                term=n.term,
                last_index=n.log.last_index,
                last_term=n.log.last_term,
                force=force,
            )
        )


def handle_vote(n: RawNode, m: RequestVote) -> None:
    """Grant a vote if we have not voted for another and the candidate's log is current."""
    can_vote = n.vote == m.src or (n.vote is None and n.leader is None)
    granted = can_vote and n.log.is_up_to_date(m.last_index, m.last_term)
    if granted:
        n.vote = m.src
        n._election_elapsed = 0
        n._emit("vote-granted", candidate=m.src)
    n._msgs.append(
        RequestVoteResp(group=n.group, src=n.id, dst=m.src, term=n.term, granted=granted)
    )


def handle_vote_resp(n: RawNode, m: RequestVoteResp) -> None:
    """Count a vote; a decided election makes us leader or follower."""
    if n.role != "candidate":
        return
    n._votes[m.src] = m.granted
    result = quorum.joint_vote(n._vote_conf(), n._votes)
    if result == "won":
        n._become_leader()
    elif result == "lost":
        n._become_follower(n.term, None, "lost-election")


def handle_timeout_now(n: RawNode, m: TimeoutNow) -> None:
    """Campaign at once, bypassing the voters' lease (force)."""
    n._emit("timeout-now-received", **{"from": m.src})
    if n._is_promotable():
        campaign(n, force=True)


def reply_stale(n: RawNode, msg: Message) -> None:
    """A lower-term sender learns our term from the answer and steps down."""
    if isinstance(msg, AppendEntries):
        n._msgs.append(
            AppendEntriesResp(group=n.group, src=n.id, dst=msg.src, term=n.term, success=False)
        )
    elif isinstance(msg, InstallSnapshot):
        n._msgs.append(
            InstallSnapshotResp(
                group=n.group,
                src=n.id,
                dst=msg.src,
                term=n.term,
                index=0,
                success=False,
            )
        )
    elif isinstance(msg, RequestVote):
        n._emit("vote-ignored", candidate=msg.src, reason="stale-term")
        n._msgs.append(
            RequestVoteResp(group=n.group, src=n.id, dst=msg.src, term=n.term, granted=False)
        )
