"""The leader half of RawNode: replication, flow control, commit, heartbeats.

Each peer in `_prs` (voters, learners, and new peers still catching up) is
sent entries from its `next` index while its Progress is not paused; a peer
whose next entries are compacted gets the snapshot instead. Heartbeats go
out every `heartbeat_ticks`: a probe for peers in probe state, otherwise an
empty append anchored at the peer's match (always accepted, so it can never
cause a spurious rejection) carrying the commit index up to that match. A
peer in replicate state that was sent an answered append or heartbeat since
the last round, and whose window is not full, is skipped if a message already told it
the commit a heartbeat would (commit capped at its match): that message
reset its election timer, and its answer keeps it active
for the quorum check; so a peer still hears from the leader at least every
two rounds. Rounds skip only where two of them fit inside an election
timeout (`may_skip_beats`). A full window still gets its heartbeat, whose answer frees a
slot if an append was lost (as etcd does). In the simulator's default plan
this took the Raft messages from 71.7k to 62.3k (docs/simulation.md). A new
commit is announced to every peer at once; to a streaming peer the
announcement is unanswered (`bcast_append`): 57.3k messages to 47.0k.
Commit advances to the joint-majority match index, but only over an entry of
the leader's own term (Raft §5.4.2). Every election timeout the leader checks
that a quorum answered since the last check, else steps down (lost-quorum).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _follower as fol
from . import _membership as mem
from . import _read as rd
from . import quorum
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    Entry,
    InstallSnapshot,
    InstallSnapshotResp,
    NodeId,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
)
from .progress import Progress

if TYPE_CHECKING:
    from .facade import RaftConfig
    from .node import RawNode


def tick_leader(n: RawNode) -> None:
    """One leader tick: stall detection, quorum check, catch-up waits, heartbeats."""
    n._heartbeat_elapsed += 1
    n._election_elapsed += 1
    for pr in n._prs.values():
        pr.stall_ticks = pr.stall_ticks + 1 if pr.has_outstanding() else 0
        if pr.stall_ticks >= n.cfg.election_timeout_ticks:
            pr.become_probe()  # an append or snapshot was lost: start over
    if n._election_elapsed >= n.cfg.election_timeout_ticks:
        n._election_elapsed = 0
        n._transferee = None  # a transfer not done in one timeout is abandoned
        lost = not has_active_quorum(n)
        if lost and "skip-check-quorum" not in n._bugs:  # PLANTED BUG if skipped
            n._become_follower(n.term, None, "lost-quorum")
            return
    mem.tick_change(n)
    if n.role != "leader":
        return
    if n._heartbeat_elapsed >= n.cfg.heartbeat_ticks:
        n._heartbeat_elapsed = 0
        skips = may_skip_beats(n.cfg)
        for peer, pr in sorted(n._prs.items()):
            if pr.state == "probe":
                pr.probe_sent = False
            heard, pr.sent_since_beat = pr.sent_since_beat, False
            if send_append(n, peer, allow_empty=pr.state == "probe"):
                continue
            told = pr.commit_sent >= min(n.log.committed, pr.match)
            if heard and told and pr.state == "replicate" and not pr.is_paused() and skips:
                continue  # see the module doc: a busy peer needs no heartbeat
            send_heartbeat(n, peer)
            pr.sent_since_beat = False  # the round's own beat: the next round beats too


def may_skip_beats(cfg: RaftConfig) -> bool:
    """Whether a round may skip a busy peer. A skipped peer next hears from us
    (and next answers) up to two rounds after the message that let us skip
    it; that gap must fit inside an election timeout, which is both the
    quorum check's window and the shortest timeout a follower draws.
    Otherwise a healthy leader steps down (election 3 ticks, heartbeat 2:
    sim seed 15, 7 leader changes in the quiet period)."""
    return 2 * cfg.heartbeat_ticks < cfg.election_timeout_ticks


def has_active_quorum(n: RawNode) -> bool:
    """Whether a (joint) quorum answered since the last check; resets the marks."""
    active = {p: True for p, pr in n._prs.items() if pr.recent_active}
    active[n.id] = True
    for pr in n._prs.values():
        pr.recent_active = False
    return quorum.joint_vote(n._vote_conf(), active) == "won"


def new_progress(n: RawNode, peer: NodeId) -> Progress:
    """Progress for a peer we start replicating to, probing from our last index."""
    pr = Progress(n.log.last_index + 1, n.cfg.max_inflight_appends)
    # Members of the bootstrap configuration were started with it.
    pr.base_known = n.log.offset > 0 or peer in quorum.members(n._base_conf)
    return pr


def sync_progress(n: RawNode, drop: bool) -> None:
    """Track every member of the configuration; with `drop`, forget others
    (except new peers a change is still catching up)."""
    wanted = quorum.members(n.conf) - {n.id}
    if n._ctx is not None:
        wanted |= set(n._ctx.waiting)
    for p in sorted(wanted):
        if p not in n._prs:
            n._prs[p] = new_progress(n, p)
    if drop:
        for p in list(n._prs):
            if p not in wanted:
                del n._prs[p]


def append(n: RawNode, entries: list[Entry]) -> None:
    """Append the leader's own entries, replicate them, and try to commit."""
    n.log.append(entries)
    fol.on_appended(n, entries, truncated=False)
    if n.role != "leader":
        return
    if any(e.kind == "config" for e in entries):
        sync_progress(n, drop=False)
    for peer in sorted(n._prs):
        send_append(n, peer)
    maybe_commit(n)


def send_append(n: RawNode, to: NodeId, allow_empty: bool = False) -> bool:
    """Send `to` what it lacks, if flow control allows; whether we sent."""
    pr = n._prs[to]
    if pr.is_paused():
        return False
    prev = pr.next - 1
    if prev == 0 and n.log.offset == 0 and not pr.base_known:
        # A peer fed from index 1 would never learn the bootstrap configuration
        # (it is in no entry): send it first, as the snapshot at index 0.
        return send_snapshot(n, to, pr)
    prev_term = n.log.term(prev)
    if prev_term is None:
        return send_snapshot(n, to, pr)
    entries = n.log.slice(pr.next, n.log.last_index + 1, n.cfg.max_entries_per_append)
    if not entries and not allow_empty:
        return False
    n._msgs.append(
        AppendEntries(
            group=n.group,
            src=n.id,
            dst=to,
            term=n.term,
            prev_index=prev,
            prev_term=prev_term,
            entries=tuple(entries),
            commit=n.log.committed,
        )
    )
    last = entries[-1].index if entries else prev
    pr.sent(last, len(entries))
    pr.sent_since_beat = True
    pr.commit_sent = max(pr.commit_sent, min(n.log.committed, last))
    return True


def send_snapshot(n: RawNode, to: NodeId, pr: Progress) -> bool:
    """Send our snapshot to `to` and wait for it (snapshot state)."""
    snap = n.log.snapshot
    if snap is None:
        # Nothing is compacted: the "snapshot" is the bootstrap configuration
        # at index 0, which lives in no log entry (see send_append).
        meta = SnapshotMeta(index=0, term=0, conf=n._base_conf, conf_token=n._base_token)
        snap = Snapshot(meta=meta)
    pr.become_snapshot(snap.meta.index)
    n._msgs.append(InstallSnapshot(group=n.group, src=n.id, dst=to, term=n.term, snapshot=snap))
    n._emit("snapshot-sent", peer=to, index=snap.meta.index, snap_term=snap.meta.term)
    return True


def send_heartbeat(n: RawNode, to: NodeId, read_ctx: int = 0, answer: bool = True) -> None:
    """An empty append anchored at `to`'s match: always accepted. Without
    `answer`, `to` answers it only with a rejection (see `bcast_append`)."""
    pr = n._prs[to]
    prev = pr.match if pr.state != "snapshot" else 0
    prev_term = n.log.term(prev)
    if prev_term is None:
        prev, prev_term = 0, 0
    # Only a message that is answered counts for the next round's skip: the
    # answer is what keeps the peer active for the quorum check.
    pr.sent_since_beat = pr.sent_since_beat or answer
    pr.commit_sent = max(pr.commit_sent, min(n.log.committed, prev))
    n._msgs.append(
        AppendEntries(
            group=n.group,
            src=n.id,
            dst=to,
            term=n.term,
            prev_index=prev,
            prev_term=prev_term,
            commit=min(n.log.committed, prev),
            read_ctx=read_ctx,
            answer=answer,
        )
    )


def bcast_append(n: RawNode) -> None:
    """Tell every peer about new entries or, failing that, the new commit.

    A commit announcement to a peer in replicate state with room in its
    window asks for no answer: the answer would tell the leader nothing
    (the peer's match is where the heartbeat is anchored), and the appends
    whose acks moved the commit are answered anyway. A probing peer, or
    one whose window is full, still answers: that answer is what moves it
    on. In the simulator's default plan this was 9,400 of 57.3k messages'
    answers (docs/simulation.md)."""
    for peer in sorted(n._prs):
        if not send_append(n, peer):
            pr = n._prs[peer]
            send_heartbeat(n, peer, answer=pr.state != "replicate" or pr.is_paused())


def send_timeout_now(n: RawNode, to: NodeId) -> None:
    """Tell `to` to campaign at once (leader transfer, removed leader)."""
    n._msgs.append(TimeoutNow(group=n.group, src=n.id, dst=to, term=n.term))
    n._emit("timeout-now-sent", peer=to)


def maybe_commit(n: RawNode) -> bool:
    """Advance commit to what a (joint) majority holds; whether it moved."""
    match = {p: pr.match for p, pr in n._prs.items()}
    match[n.id] = n.log.last_index
    index = min(quorum.joint_committed(n._commit_conf(), match), n.log.last_index)
    if index <= n.log.committed:
        return False
    if n.log.term(index) != n.term and "commit-previous-term" not in n._bugs:
        # Raft §5.4.2: count replicas only for entries of our own term.
        # ("commit-previous-term" is a PLANTED BUG that skips this check.)
        return False
    old = n.log.committed
    n.log.commit_to(index)
    # Tell the peers first: if this commit removes us, they still learn it.
    bcast_append(n)
    fol.on_commit_advanced(n, old)
    return True


def handle_append_resp(n: RawNode, m: AppendEntriesResp) -> None:
    """Leader: advance or back off `m.src`'s progress, commit, send more."""
    pr = n._prs.get(m.src)
    if pr is None:
        return
    pr.recent_active = True
    if m.read_ctx:
        # Any answer at our term (a rejection too) shows `m.src` still follows us.
        rd.on_ack(n, m.src, m.read_ctx)
    if not m.success:
        if pr.maybe_decrease(m.match_index, m.reject_hint):
            send_append(n, m.src)
        return
    if pr.maybe_update(m.match_index):
        if pr.state == "probe":
            pr.become_replicate()
        elif pr.state == "snapshot" and pr.match >= pr.pending_snapshot:
            pr.become_probe()
        maybe_commit(n)
        if n.role != "leader":
            return
        if n._transferee == m.src and pr.match == n.log.last_index:
            send_timeout_now(n, m.src)
    elif pr.state == "probe" and m.match_index == pr.match == pr.next - 1:
        pr.become_replicate()  # it matches exactly where we probed: stream from there
    elif pr.state == "replicate" and pr.is_paused():
        # Nothing new acknowledged while the window is full (a heartbeat's
        # answer): an append may be lost, so let one more go (as etcd does).
        pr.inflight.popleft()
    mem.check_catchup(n, m.src)
    if m.src in n._prs:
        while send_append(n, m.src):
            pass


def handle_snapshot_resp(n: RawNode, m: InstallSnapshotResp) -> None:
    """Leader: a snapshot was installed (or failed) on `m.src`."""
    pr = n._prs.get(m.src)
    if pr is None:
        return
    pr.recent_active = True
    if not m.success:
        pr.become_probe()
        if n._ctx is not None and m.src in n._ctx.waiting:
            mem.fail_change(n, "ECATCHUP", f"{m.src} failed to install the snapshot")
        return
    pr.base_known = True
    pr.maybe_update(m.index)
    if pr.state == "snapshot":
        pr.become_probe()
    maybe_commit(n)
    if n.role != "leader":
        return
    mem.check_catchup(n, m.src)
    if m.src in n._prs:
        send_append(n, m.src)
