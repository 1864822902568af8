"""Elections: timeouts, campaigns, votes, the leader lease and TimeoutNow.

A follower campaigns when its randomized timeout (from the injected RNG)
fires, if it is a voter. With `pre_vote` (the default) it first asks the
voters whether they WOULD vote for it at the next term (Raft thesis 9.6) and
campaigns only once a quorum says yes: the question changes nobody's term, so
a node cut off from the group stays at its term however often it times out,
and rejoining does not depose a leader that kept working. A voter that heard
from a leader within the minimum election timeout ignores RequestVote and
Pre-Vote alike (the lease), unless the vote is `force`d by a TimeoutNow (which
also skips the Pre-Vote: the leader asked for it). A joint configuration's
election must be won in both halves. Lower-term senders get an answer
carrying our term so they step down.
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
        if not n._is_promotable():
            return
        if n.cfg.pre_vote:
            pre_campaign(n)
        else:
            campaign(n, force=False)


def pre_campaign(n: RawNode) -> None:
    """Ask every voter for a Pre-Vote at term + 1; our term and vote stay."""
    n._set_leader(None)  # timed out: whatever leader we knew is no lease any more
    n._votes = {n.id: True}
    n._prevoting = True
    n._emit("pre-campaign", pre_term=n.term + 1)
    if quorum.joint_vote(n._vote_conf(), n._votes) == "won":
        campaign(n, force=False)
        return
    _ask_voters(n, n.term + 1, force=False, pre=True)


def campaign(n: RawNode, force: bool) -> None:
    """Become candidate and ask every voter (both halves if joint) for a vote."""
    n._become_candidate()
    if quorum.joint_vote(n._vote_conf(), n._votes) == "won":
        n._become_leader()
        return
    _ask_voters(n, n.term, force=force, pre=False)


def _ask_voters(n: RawNode, term: int, *, force: bool, pre: bool) -> None:
    for v in sorted(quorum.voters(n.conf) - {n.id}):
        n._msgs.append(
            RequestVote(
                group=n.group,
                src=n.id,
                dst=v,
                term=term,
                last_index=n.log.last_index,
                last_term=n.log.last_term,
                force=force,
                pre=pre,
            )
        )


def handle_pre_vote(n: RawNode, m: RequestVote) -> None:
    """Say whether we would vote for `m.src` at `m.term`; change nothing of ours.

    Inside the lease the question is ignored, as a RequestVote would be: the
    leader we hear from is alive. A refusal carries our term, so a sender
    behind the group learns the term and rejoins as a follower."""
    if m.term > n.term and n._in_lease() and "ignore-vote-lease" not in n._bugs:
        n._emit("vote-ignored", candidate=m.src, reason="leader-lease", pre=True)
        return
    would_vote = m.term > n.term or n.vote == m.src or (n.vote is None and n.leader is None)
    granted = m.term >= n.term and would_vote and n.log.is_up_to_date(m.last_index, m.last_term)
    if granted:
        n._emit("pre-vote-granted", candidate=m.src, pre_term=m.term)
    n._msgs.append(
        RequestVoteResp(
            group=n.group, src=n.id, dst=m.src, term=m.term if granted else n.term,
            granted=granted, pre=True,
        )
    )  # fmt: skip


def handle_pre_vote_resp(n: RawNode, m: RequestVoteResp) -> None:
    """Count a Pre-Vote answer; a quorum of yes starts the real campaign.

    A refusal from a higher term makes us a follower of that term (we were
    behind); a late answer after we heard from a leader is dropped."""
    if not m.granted and m.term > n.term:
        n._become_follower(m.term, None, "higher-term")
        return
    if not n._prevoting or n.leader is not None or (m.granted and m.term != n.term + 1):
        return
    n._votes[m.src] = m.granted
    result = quorum.joint_vote(n._vote_conf(), n._votes)
    if result == "won":
        campaign(n, force=False)
    elif result == "lost":
        n._prevoting = False
        n._emit("pre-vote-lost", pre_term=n.term + 1)


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
    """Count a vote; a decided election makes us leader or follower.

    A candidate whose election timed out is pre-voting for the next term (its
    role stays candidate) and `_votes` holds that round's Pre-Votes: a late
    vote of this term counted with them made a leader of term 6 from two real
    votes of five (sim seed 9143 of the cancel-race mix, election-quorum)."""
    if n.role != "candidate" or n._prevoting:
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
        n._emit("vote-ignored", candidate=msg.src, reason="stale-term", pre=msg.pre)
        n._msgs.append(
            RequestVoteResp(
                group=n.group, src=n.id, dst=msg.src, term=n.term, granted=False, pre=msg.pre
            )
        )
