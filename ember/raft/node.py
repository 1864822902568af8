"""RawNode: one member of one Raft group, as a sans-IO state machine.

Theory of operation. The driver feeds the node inputs (`tick`, `step`,
`propose`, `change_peers`, `transfer_leader`, `compact`) and drains its
outputs with `ready()` / `advance()`: entries and hard state to persist,
messages to send, committed entries to apply, audit events and change
results. Nothing here touches a clock, socket or thread, and every random
choice comes from the injected `random.Random`, so a seed replays exactly.

Roles change only in the `_become_*` methods. A follower that hears nothing
from a leader for a randomized election timeout in [T, 2T) campaigns, unless
it is not a voter of the configuration in force, and (with `pre_vote`) only
after a quorum answered a Pre-Vote for the next term. While it has heard from a
leader within T ticks it ignores RequestVote (the leader lease), except a
`force`d one that a TimeoutNow triggered. A configuration takes effect when
its entry is appended (and rolls back if that entry is truncated); a joint
configuration needs a majority of old AND new for votes and commits; learners
count in neither. The leader commits only entries of its own term by
counting, appends a no-op on election, and drives membership changes through
`changepeers.ChangeContext` (see there). Replication to each peer is flow
controlled by `progress.Progress`; a peer whose entries were compacted gets
the snapshot. The leader steps down when a quorum stops answering for an
election timeout, when it sees a higher term, or when the stable
configuration that removes it commits (it then wakes the voter with the
longest log with TimeoutNow).
"""

from __future__ import annotations

import random
from typing import Any

from . import _election as elec
from . import _follower as fol
from . import _leader as lead
from . import _membership as mem
from . import _read, confchange, quorum
from .changepeers import ChangeContext, Event
from .errors import ChangeBusy, InvalidConfig, NotLeader, StaleToken, WrongTerm
from .facade import (
    PLANTED_BUGS,
    ChangeResult,
    ChangeTicket,
    PersistedState,
    RaftConfig,
    Ready,
    Role,
    Status,
)
from .log import RaftLog
from .messages import (
    AppendEntries,
    AppendEntriesResp,
    ConfState,
    Entry,
    GroupId,
    HardState,
    InstallSnapshot,
    Message,
    NodeId,
    RequestVote,
    RequestVoteResp,
    Snapshot,
    TimeoutNow,
)
from .progress import Progress

EMPTY_CONF = ConfState(peers=())


def conf_fields(conf: ConfState) -> dict[str, Any]:
    """The peer-set fields of config events (sorted lists, docs/events.md)."""
    return {
        "peers": sorted(conf.peers),
        "old_peers": None if conf.old_peers is None else sorted(conf.old_peers),
        "learners": sorted(conf.learners),
    }


class RawNode:
    """A Raft node with no IO; see the module docstring and docs/raft-api.md.

    The follower, leader and membership halves live in their own modules (one
    concern each) as functions of the node; this class holds the state, the
    facade and the role changes.
    """

    def __init__(
        self,
        node_id: NodeId,
        group: GroupId,
        config: RaftConfig,
        rng: random.Random,
        *,
        conf: ConfState | None = None,
        persisted: PersistedState | None = None,
    ) -> None:
        self.id = node_id
        self.group = group
        self.cfg = config
        self._rng = rng
        self._bugs = config.planted_bugs
        hs = persisted.hard_state if persisted else HardState()
        snap = persisted.snapshot if persisted else None
        self.log = RaftLog(snap, persisted.entries if persisted else (), hs.commit)
        boot = confchange.check(conf) if conf else EMPTY_CONF
        self._base_conf = snap.meta.conf if snap else boot
        self._base_token = snap.meta.conf_token if snap else 0
        self.term, self.vote = hs.term, hs.vote
        self.role: Role = "follower"
        self.leader: NodeId | None = None
        self.conf, self.conf_index, self.conf_token = fol.conf_at(self, self.log.last_index)
        self._prs: dict[NodeId, Progress] = {}
        self._votes: dict[NodeId, bool] = {}
        self._prevoting = False  # a Pre-Vote round of ours is counting `_votes`
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._transferee: NodeId | None = None
        self._ctx: ChangeContext | None = None
        self._tickets = 0
        self._msgs: list[Message] = []
        self._events: list[dict[str, Any]] = []
        self._results: list[ChangeResult] = []
        self._prev_hs = HardState(term=self.term, vote=self.vote, commit=self.log.committed)
        # ReadIndex (see _read): (context, read index) waiting for a quorum /
        # confirmed; the highest context each peer answered in this term.
        self._read_seq = 0
        self._reads_pending: list[tuple[int, int]] = []
        self._reads_ready: list[tuple[int, int]] = []
        self._read_acks: dict[NodeId, int] = {}

    # ------------------------------------------------------------------ facade

    def tick(self) -> None:
        """Advance logical time by one tick."""
        if self.role == "leader":
            lead.tick_leader(self)
        else:
            elec.tick_election(self)

    def step(self, msg: Message) -> None:
        """Handle one message; messages for other groups or nodes are ignored."""
        if msg.group != self.group or msg.dst != self.id:
            return
        # Pre-Vote questions and answers never move a term by themselves.
        if isinstance(msg, RequestVote) and msg.pre:
            if msg.term < self.term:
                elec.reply_stale(self, msg)
            else:
                elec.handle_pre_vote(self, msg)
            return
        if isinstance(msg, RequestVoteResp) and msg.pre:
            elec.handle_pre_vote_resp(self, msg)
            return
        if msg.term > self.term:
            if isinstance(msg, RequestVote):
                lease = not msg.force and self._in_lease()
                if lease and "ignore-vote-lease" not in self._bugs:  # PLANTED BUG if not
                    self._emit("vote-ignored", candidate=msg.src, reason="leader-lease", pre=False)
                    return
                self._emit_vote_request(msg)
            is_leader_msg = isinstance(msg, AppendEntries | InstallSnapshot | TimeoutNow)
            # A follower that refuses a candidate's vote keeps its election timer
            # (only a leader's message or a vote granted resets it, Raft §5.2).
            # Reset on every RequestVote, a voter with the longer log never timed
            # out while a candidate with a stale log kept asking (L2, sim seed 10:
            # a two-voter group without a leader for 2.6 s after the heal).
            keep = self.role == "follower" and isinstance(msg, RequestVote)
            elapsed, timeout = self._election_elapsed, self._timeout
            self._become_follower(msg.term, msg.src if is_leader_msg else None, "higher-term")
            if keep:
                self._dispatch(msg)
                if self.vote != msg.src:
                    self._election_elapsed, self._timeout = elapsed, timeout
                return
        elif msg.term < self.term:
            elec.reply_stale(self, msg)
            return
        self._dispatch(msg)

    def propose(self, data: bytes) -> int:
        """Append a normal entry; returns its index. Raises NotLeader."""
        self._require_leader()
        if self._transferee is not None:
            raise NotLeader(f"leadership transfer to {self._transferee} in progress", self.leader)
        index = self.log.last_index + 1
        lead.append(self, [Entry(term=self.term, index=index, data=data)])
        return index

    def change_peers(
        self,
        peers: tuple[NodeId, ...] | list[NodeId],
        learners: tuple[NodeId, ...] | list[NodeId] = (),
        *,
        token: int,
        term: int | None = None,
    ) -> ChangeTicket:
        """Start moving the group to `peers` + `learners` (jraft changePeers)."""
        self._require_leader()
        if term is not None and term != self.term:
            raise WrongTerm(f"change is for term {term} but the leader is at term {self.term}")
        target = confchange.stable(peers, learners)
        if token < self.conf_token:
            raise StaleToken(
                f"token {token} is older than the configuration in force (token {self.conf_token})"
            )
        self._tickets += 1
        ticket = ChangeTicket(
            id=self._tickets, token=token, peers=target.peers, learners=target.learners
        )
        if (
            not self.conf.is_joint
            and self._conf_committed()
            and confchange.same_members(self.conf, target)
        ):
            mem.finish_ticket(self, ticket, True, None, "configuration already in place")
            return ticket
        if self._ctx is not None or self.conf.is_joint:
            stage = self._ctx.stage.value if self._ctx else "joint"
            cur = self._ctx.token if self._ctx else self.conf_token
            raise ChangeBusy(f"a change (token {cur}) is in flight at stage {stage}")
        if self.conf_index > self.log.committed:
            # As jraft: no change until the configuration in force is committed
            # (a new leader's inherited entry); the catch-up check would go stale.
            raise ChangeBusy(
                f"the configuration entry at {self.conf_index} is not committed yet "
                f"(commit {self.log.committed})",
                settling=True,
            )
        if self.log.term(self.log.committed) != self.term:
            # As jraft (a new leader's first entry commits before any change):
            # until an entry of its own term commits, the leader's commit index
            # and its peers' progress are from an older term (R7).
            raise ChangeBusy(
                f"no entry of term {self.term} is committed yet (commit {self.log.committed})",
                settling=True,
            )
        mem.start_change(self, ticket, target)
        return ticket

    def transfer_leader(self, to: NodeId) -> None:
        """Hand leadership to voter `to`: catch it up, then send TimeoutNow."""
        self._require_leader()
        if to == self.id or to == self._transferee:
            return
        if to not in quorum.voters(self.conf):
            raise InvalidConfig(f"cannot transfer leadership to {to}: not a voter")
        self._transferee = to
        self._election_elapsed = 0  # the transfer aborts after one election timeout
        pr = self._prs[to]
        if pr.match == self.log.last_index:
            lead.send_timeout_now(self, to)
        else:
            lead.send_append(self, to)

    def read_index(self) -> int:
        """Start a linearizable read; returns its context (see `_read`).

        Raises NotLeader on a non-leader, and on a leader whose commit index
        is not yet known to be current (nothing committed in its term).
        """
        return _read.read_index(self)

    def take_reads(self) -> list[tuple[int, int]]:
        """(context, read index) of every read confirmed since the last call:
        serve each once the state machine has applied its read index."""
        reads, self._reads_ready = self._reads_ready, []
        return reads

    def set_planted_bug(self, bug: str, on: bool) -> None:
        """Switch a test-only planted defect (RaftConfig.planted_bugs) at run time,
        so a node's failpoint can plant it in a live cluster."""
        if bug not in PLANTED_BUGS:
            known = ", ".join(sorted(PLANTED_BUGS))
            raise ValueError(f"unknown planted bug {bug!r}; known: {known}")
        self._bugs = self._bugs | {bug} if on else self._bugs - {bug}

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The application snapshotted its state at applied `index`; returns the
        snapshot for the driver to persist (the durable log may drop up to it)."""
        conf, _, token = fol.conf_at(self, index)
        snap = self.log.compact(index, data, conf, token)
        # Config entries up to `index` are gone: the snapshot now carries them.
        self._base_conf, self._base_token = conf, token
        return snap

    def has_ready(self) -> bool:
        """Whether `ready()` would hand out any work."""
        return bool(
            self._msgs
            or self._events
            or self._results
            or self.log.pending_snapshot is not None
            or self.log.stable_last < self.log.last_index
            or self.log.applied < self.log.committed
            # Field by field: the node loop asks every group on every wake-up,
            # and building a HardState to compare is most of that cost.
            or self.term != self._prev_hs.term
            or self.vote != self._prev_hs.vote
            or self.log.committed != self._prev_hs.commit
        )

    def ready(self) -> Ready:
        """Take the pending work; call `advance` with it once it is done."""
        hs = self._hard_state()
        rd = Ready(
            messages=self._msgs,
            entries=self.log.unstable(),
            hard_state=hs if hs != self._prev_hs else None,
            snapshot=self.log.pending_snapshot,
            committed_entries=self.log.to_apply(),
            events=self._events,
            change_results=self._results,
        )
        self._msgs, self._events, self._results = [], [], []
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver persisted, sent and applied what `rd` held."""
        if rd.hard_state is not None:
            self._prev_hs = rd.hard_state
        if rd.entries:
            self.log.stable_to(rd.entries[-1].index, rd.entries[-1].term)
        if rd.snapshot is not None and self.log.pending_snapshot is rd.snapshot:
            self.log.pending_snapshot = None
        if rd.committed_entries:
            self.log.applied_to(rd.committed_entries[-1].index)

    def _conf_committed(self) -> bool:
        return self.conf_index <= self.log.committed

    def _idle_stage(self) -> str:
        """The stage of a node driving no change. A new leader may inherit C(new)
        appended but not committed; as in jraft (whose new leader re-appends its
        configuration and waits in STAGE_STABLE) it is in the stable stage
        until that entry commits: a driver that took it for done wrote stable
        before the group committed it (M1; sim seed 7058 of the cancel-race mix)."""
        return "stable" if self.role == "leader" and not self._conf_committed() else "none"

    def status(self) -> Status:
        """A copy of the node's state."""
        progress: dict[NodeId, int] = {}
        if self.role == "leader":
            progress = {p: pr.match for p, pr in sorted(self._prs.items())}
            progress[self.id] = self.log.last_index
        return Status(
            id=self.id,
            group=self.group,
            role=self.role,
            term=self.term,
            leader=self.leader,
            commit=self.log.committed,
            applied=self.log.applied,
            last_index=self.log.last_index,
            conf=self.conf,
            stage=self._ctx.stage.value if self._ctx else self._idle_stage(),
            token=self.conf_token,
            progress=progress,
        )

    def progress(self, peer: NodeId) -> Progress | None:
        """The leader's replication state for `peer` (tests and describe)."""
        return self._prs.get(peer)

    # ------------------------------------------------------------------ roles

    def _become_follower(self, term: int, leader: NodeId | None, reason: str) -> None:
        if self.role == "leader":
            if self._transferee is not None and reason == "higher-term":
                reason = "transfer"
            self._emit("step-down", reason=reason)
            mem.abort_change(self, reason)
        self._set_term(term)
        self._set_role("follower")
        self._set_leader(leader)
        self._reset_timers()

    def _become_candidate(self) -> None:
        self._set_term(self.term + 1)
        self.vote = self.id
        self._set_role("candidate")
        self._set_leader(None)
        self._reset_timers()
        self._votes = {self.id: True}

    def _become_leader(self) -> None:
        self._set_role("leader")
        self._set_leader(self.id)
        self._reset_timers()
        self._prs = {}
        lead.sync_progress(self, drop=True)
        lead.append(self, [Entry(term=self.term, index=self.log.last_index + 1, kind="noop")])
        if self.conf.is_joint:
            # An inherited C(old, new): finish it once it is known committed.
            old = ConfState(peers=self.conf.old_peers or ())
            target = ConfState(peers=self.conf.peers, learners=self.conf.learners)
            ctx = ChangeContext(None, self.conf_token, old, target, 0, 0)
            ctx.fire(Event.INHERIT_JOINT)
            ctx.entry_index = self.conf_index
            self._ctx = ctx
            mem.emit_stage(self)
            mem.advance_change(self)

    def _reset_timers(self) -> None:
        self._election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._transferee = None
        self._votes = {}
        self._prevoting = False
        _read.forget_pending(self)
        if self.role != "leader":
            self._prs = {}

    def _random_timeout(self) -> int:
        t = self.cfg.election_timeout_ticks
        return t + self._rng.randrange(t)

    def _set_term(self, term: int) -> None:
        if term != self.term:
            self.term = term
            self.vote = None
            self._emit("term")

    def _set_role(self, role: Role) -> None:
        if role != self.role:
            self.role = role
            self._emit("role", role=role)

    def _set_leader(self, leader: NodeId | None) -> None:
        if leader != self.leader:
            self.leader = leader
            self._emit("leader", leader=leader)

    def _is_promotable(self) -> bool:
        """Whether this node may campaign: a voter of the configuration in
        force, or of the one before it while the entry that removed it is not
        known committed. Without the second case a group can deadlock: if the
        old voters hold an uncommitted C(new) that the new voters lack, none of
        them could campaign and the new voters' logs are too short to win."""
        if self.id in quorum.voters(self.conf):
            return True
        if self.conf_index <= self.log.committed:
            return False
        previous, _, _ = fol.conf_at(self, self.conf_index - 1)
        return self.id in quorum.voters(previous)

    def _in_lease(self) -> bool:
        return self.leader is not None and self._election_elapsed < self.cfg.election_timeout_ticks

    def _require_leader(self) -> None:
        if self.role != "leader":
            raise NotLeader(f"{self.id} is not the leader of {self.group}", self.leader)

    # ------------------------------------------------------------------ quorum views

    def _vote_conf(self) -> ConfState:
        conf = self.conf
        if "count-learners" in self._bugs:  # PLANTED BUG: learners vote
            conf = ConfState(
                peers=conf.peers + conf.learners, old_peers=conf.old_peers, learners=()
            )
        return conf

    def _commit_conf(self) -> ConfState:
        conf = self._vote_conf()
        if "single-majority-joint" in self._bugs and conf.is_joint:  # PLANTED BUG
            conf = ConfState(peers=conf.peers, learners=conf.learners)
        return conf

    # ------------------------------------------------------------------ dispatch

    def _dispatch(self, msg: Message) -> None:
        if isinstance(msg, AppendEntries | InstallSnapshot) and self.role == "candidate":
            self._become_follower(msg.term, msg.src, "lost-election")
        if isinstance(msg, AppendEntries):
            if self.role == "follower":
                fol.handle_append(self, msg)
        elif isinstance(msg, InstallSnapshot):
            if self.role == "follower":
                fol.handle_snapshot(self, msg)
        elif isinstance(msg, RequestVote):
            elec.handle_vote(self, msg)
        elif isinstance(msg, RequestVoteResp):
            elec.handle_vote_resp(self, msg)
        elif isinstance(msg, TimeoutNow):
            elec.handle_timeout_now(self, msg)
        elif self.role == "leader":
            if isinstance(msg, AppendEntriesResp):
                lead.handle_append_resp(self, msg)
            else:
                lead.handle_snapshot_resp(self, msg)

    # ------------------------------------------------------------------ events

    def _emit(self, kind: str, **fields: Any) -> None:
        self._events.append({"kind": kind, "group": self.group, "term": self.term, **fields})

    def _emit_vote_request(self, msg: RequestVote) -> None:
        # What the vote-lease rule (R10) needs: the lease as this node held it.
        since = self._election_elapsed if self.leader is not None else None
        self._emit(
            "vote-request",
            candidate=msg.src,
            force=msg.force,
            leader=self.leader,
            since_leader_ticks=since,
            lease_ticks=self.cfg.election_timeout_ticks,
        )

    def _emit_config(self, kind: str, e: Entry) -> None:
        assert e.conf is not None
        stage = "joint" if e.conf.is_joint else "stable"
        self._emit(kind, index=e.index, stage=stage, token=e.token, **conf_fields(e.conf))

    def _hard_state(self) -> HardState:
        return HardState(term=self.term, vote=self.vote, commit=self.log.committed)
