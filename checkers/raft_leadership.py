"""Leadership rules of the raft audit checker: vote lease, transfers, removal.

Theory of operation: `checkers.raft` replays each node's events into one
`NodeGroup` per (node, group) and hands the events below to these handlers,
which judge them against what that node knew then (the configuration in
force, whether it is committed):

- R10 vote lease: a `vote-request` (a higher-term RequestVote the node took
  in, adopting its term) is legal only if forced by a transfer or if the
  node held no lease: no known leader, or `since_leader_ticks` at or past
  `lease_ticks`. The fields are the node's own counters at the moment it
  decided, so a node that skips its lease check reports a lease it ignored.
- R2 transfers: a `timeout-now-sent` names a voter of the sender's
  configuration in force; a node that campaigns on a `timeout-now-received`
  (its next events: `term`, then `role: candidate`) is a voter of its own
  configuration, or of the previous one while the entry removing it is not
  known committed (the window RawNode._is_promotable allows).
- R12 leaving: a `step-down` with reason `removed` comes only once the
  node's configuration in force is a stable one without it, known committed
  (config-committed, or the commit index an event reports). Staying leader
  after that is `checkers.raft`'s `removed-leader-stayed`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from checkers.raft_conf import NodeGroup, describe, voters

if TYPE_CHECKING:
    from checkers.raft import Run


def may_campaign(node: str, st: NodeGroup) -> bool | None:
    """Whether `node` may campaign by what it knows; None if its configuration is unknown."""
    if st.applied is None:
        return None
    if node in voters(st.applied):
        return True
    uncommitted = st.applied_index > st.committed_index
    return uncommitted and st.previous is not None and node in voters(st.previous)


def on_vote_request(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    """R10: a higher term taken from a RequestVote while the lease held."""
    run.checked["vote-lease"] += 1
    since, lease = ev.get("since_leader_ticks"), ev.get("lease_ticks")
    if ev.get("force") or ev.get("leader") is None:
        return
    if isinstance(since, int) and isinstance(lease, int) and since < lease:
        run.flag(
            "vote-in-lease",
            (node, ev.get("term"), ev.get("candidate")),
            f"{node} took {ev.get('candidate')}'s RequestVote in {group} {since} ticks after "
            f"hearing from leader {ev.get('leader')} (lease {lease} ticks)",
            ev,
        )


def on_timeout_now_sent(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    """R2: TimeoutNow goes to a voter of the configuration in force."""
    if st.applied is None:
        return
    run.checked["transfer-voter"] += 1
    peer = str(ev.get("peer"))
    if peer not in voters(st.applied):
        run.flag(
            "timeout-now-to-non-voter",
            (node, ev.get("term"), peer),
            f"{node} sent TimeoutNow in {group} to {peer}, outside {describe(st.applied)}",
            ev,
        )


def on_timeout_now_received(
    run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]
) -> None:
    """Remember the TimeoutNow: a campaign right after it acts on it."""
    st.timeout_now = ev


def on_candidate(run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]) -> None:
    """R2: a node acting on TimeoutNow is a voter."""
    received, st.timeout_now = st.timeout_now, None
    if received is None:
        return
    allowed = may_campaign(node, st)
    if allowed is None:
        return
    run.checked["transfer-voter"] += 1
    if not allowed:
        assert st.applied is not None
        run.flag(
            "timeout-now-acted-by-non-voter",
            (node, ev.get("term")),
            f"{node} campaigned in {group} on TimeoutNow outside {describe(st.applied)}",
            received,
            ev,
        )


def on_removed_step_down(
    run: Run, node: str, group: str, st: NodeGroup, ev: dict[str, Any]
) -> None:
    """R12: removed only once the stable configuration without it is committed."""
    if st.applied is None:
        return
    run.checked["removed-step-down"] += 1
    peers, old = st.applied
    committed = st.applied_index <= st.committed_index
    if old is None and node not in peers and committed:
        return
    state = "committed" if committed else f"uncommitted at {st.applied_index}"
    run.flag(
        "removed-before-stable",
        (node, ev.get("term")),
        f"{node} stepped down as removed from {group} while its configuration was "
        f"{describe(st.applied)} ({state})",
        ev,
    )
