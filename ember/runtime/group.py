"""One Raft group on a node: the RawNode, its storage, its state machine and
the client requests waiting on it.

The node loop (`ember.runtime.node`) owns the order of work; this module
holds what one group needs for each step of it: `persist` a Ready's writes,
`apply` its committed entries (answering the proposals that wait on them),
and `maybe_compact` its log.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ember.raft import (
    AppendEntries,
    ChangeResult,
    ConfState,
    Entry,
    GroupId,
    InstallSnapshot,
    Message,
    NodeId,
    NotLeader,
    RaftConfig,
    RawNode,
    Ready,
    Snapshot,
    SnapshotMeta,
    TimeoutNow,
)
from ember.runtime.observe import OBSERVERS
from ember.storage import GroupStorage

# An `applied` audit event every this many entries, at the same indexes on
# every replica (as the simulator does), so convergence is one comparison.
# Its `state` (the machine's content digest) is computed then only: a
# hash of the whole state per apply would cost the simulator its speed.
DIGEST_EVERY = 50
# Messages only a leader sends (see Group.early_messages).
_LEADER_MSGS = (AppendEntries, InstallSnapshot, TimeoutNow)


# (index, log digest, content digest): what an `applied` audit event reports.
Applied = tuple[int, str, str]


class StateMachine(Protocol):
    """What a group's replicated state machine offers the runtime."""

    @property
    def applied(self) -> int: ...

    @property
    def digest(self) -> str: ...

    def content_digest(self) -> str:
        """A hash of what the machine holds now (not how it got there)."""
        ...

    def apply(self, entry: Entry) -> Any: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes, index: int) -> None: ...


class ProposalDropped(Exception):  # noqa: N818 -- reads as the outcome it reports
    """Another entry committed at the proposal's index: it was certainly not applied."""


class OutcomeUnknown(Exception):  # noqa: N818 -- reads as the outcome it reports
    """The proposal may or may not have been applied (e.g. a snapshot covered it)."""


class Proposal:
    """A command on its way into a group's log, with ONE future for its whole life.

    The node loop runs it between rounds (`run`); the future then becomes the
    command's applied result, or NotLeader etc. if it never reached the log.
    `proposed` tells a caller that gave up which of the two it was: a cancelled
    future is skipped by `run`, so a proposal cancelled before it ran was
    certainly not applied. One future instead of a queued call plus a waiter
    (and the task `wait_for` wraps the call in) spares every write those.
    """

    __slots__ = ("data", "future", "group_id", "proposed")

    def __init__(self, group_id: GroupId, data: bytes, future: asyncio.Future[Any]) -> None:
        self.group_id = group_id
        self.data = data
        self.future = future
        self.proposed = False

    def run(self, group: Group) -> None:
        """Append to `group`'s log and wait on the entry (raises NotLeader)."""
        if self.future.done():
            return  # the caller gave up (timeout): do not append it now
        index = group.raw.propose(self.data)
        self.proposed = True
        group.waiters[index] = (group.raw.term, self.future)


class PendingRead:
    """A linearizable read: `fn(state machine)` runs in the node loop once the
    group's leader has confirmed a read index (ReadIndex, see ember.raft._read)
    and applied up to it. The future gets fn's result, or NotLeader if this
    replica cannot serve it. Reads queued in one drain share one read index.
    """

    __slots__ = ("fn", "future", "group_id")

    def __init__(
        self, group_id: GroupId, fn: Callable[[Any], Any], future: asyncio.Future[Any]
    ) -> None:
        self.group_id = group_id
        self.fn = fn
        self.future = future

    def run(self, group: Group) -> None:
        """Queue the read for the group's next read index."""
        if not self.future.done():
            group.read_batch.append(self)


class Group:
    """A Raft group hosted on this node."""

    def __init__(
        self,
        node_id: NodeId,
        group_id: GroupId,
        storage: GroupStorage,
        machine: StateMachine,
        config: RaftConfig,
        rng: random.Random,
        *,
        bootstrap: ConfState | None,
        compact_every: int,
    ) -> None:
        self.id = group_id
        self.storage = storage
        self.sm = machine
        self.compact_every = compact_every
        # When this process last moved the state machine (an entry or a
        # snapshot), monotonic ns; None before the first: `idle_s` in reports.
        self.moved_ns: int | None = None
        persisted = storage.load()
        fresh = persisted.snapshot is None and not persisted.entries
        if fresh and bootstrap is not None:
            # The bootstrap configuration is the empty snapshot at index 0, so
            # a restart needs nothing but the store (ember.storage docs).
            snap = Snapshot(meta=SnapshotMeta(index=0, term=0, conf=bootstrap))
            storage.save(snapshot=snap)
            persisted = storage.load()
            fresh = False
        if persisted.snapshot is not None:
            self.sm.restore(persisted.snapshot.data, persisted.snapshot.meta.index)
        self.raw = RawNode(node_id, group_id, config, rng, persisted=None if fresh else persisted)
        hs = persisted.hard_state
        self._term_vote: tuple[int, str | None] = (hs.term, hs.vote)
        self.vote_changed = False  # by the last persist()
        # index -> (term proposed in, future of the command's result)
        self.waiters: dict[int, tuple[int, asyncio.Future[Any]]] = {}
        self.tickets: dict[int, asyncio.Future[ChangeResult]] = {}
        self._snap_mark: tuple[int, bytes] | None = None
        # Reads: queued this drain / waiting for a quorum (by context: term,
        # reads) / confirmed, waiting for apply (read index, reads).
        self.read_batch: list[PendingRead] = []
        self.reads: dict[int, tuple[int, list[PendingRead]]] = {}
        self.confirmed: list[tuple[int, list[PendingRead]]] = []

    @property
    def has_reads(self) -> bool:
        """Whether any read waits here (the loop skips groups without one)."""
        return bool(self.read_batch or self.reads or self.confirmed)

    def start_reads(self) -> None:
        """Ask the Raft core for ONE read index for every read queued since the last call."""
        batch = [r for r in self.read_batch if not r.future.done()]
        self.read_batch = []
        if not batch:
            return
        try:
            ctx = self.raw.read_index()
        except NotLeader as err:
            _fail(batch, err)
            return
        self.reads[ctx] = (self.raw.term, batch)

    def serve_reads(self) -> None:
        """Serve confirmed reads whose index is applied; fail those that lost their leader."""
        for ctx, index in self.raw.take_reads():
            waiting = self.reads.pop(ctx, None)
            if waiting is not None:
                self.confirmed.append((index, waiting[1]))
        lost = [
            c for c, (term, _) in self.reads.items()
            if self.raw.role != "leader" or term != self.raw.term
        ]  # fmt: skip
        if lost:
            # The core forgot them with its role: never confirmed, never will be.
            err = NotLeader(f"leadership of {self.id} moved before the read was confirmed",
                            self.raw.leader)  # fmt: skip
            for c in lost:
                _fail(self.reads.pop(c)[1], err)
        if not self.confirmed:
            return
        applied, still = self.sm.applied, []
        for index, batch in self.confirmed:
            if index > applied:
                still.append((index, batch))
                continue
            for read in batch:
                if read.future.done():
                    continue
                try:
                    read.future.set_result(read.fn(self.sm))
                except Exception as exc:  # handed to the caller
                    read.future.set_exception(exc)
        self.confirmed = still

    def fail_reads(self, err: Exception) -> None:
        """Fail every read waiting here (the replica stops)."""
        _fail(self.read_batch, err)
        for _, batch in self.reads.values():
            _fail(batch, err)
        for _, batch in self.confirmed:
            _fail(batch, err)
        self.read_batch, self.reads, self.confirmed = [], {}, []

    def persist(self, rd: Ready) -> bool:
        """Stage a Ready's snapshot, entries and hard state (durable at commit).

        Returns whether the Ready must be durable before its messages go out:
        new entries, a snapshot, or a new term or vote. A hard state whose only
        change is the commit index need not wait (as etcd's MustSync): the
        commit index is re-learnt from the leader after a restart, so it rides
        along with the next fsync instead of costing one of its own.
        """
        self.vote_changed = False
        if rd.snapshot is None and not rd.entries and rd.hard_state is None:
            return False
        self.storage.save(rd.entries, rd.hard_state, rd.snapshot)
        hs = rd.hard_state
        self.vote_changed = hs is not None and (hs.term, hs.vote) != self._term_vote
        if hs is not None:
            self._term_vote = (hs.term, hs.vote)
        return bool(rd.entries) or rd.snapshot is not None or self.vote_changed

    def early_messages(self, rd: Ready) -> list[Message]:
        """The Ready's messages that may go out before its fsync; removes them from `rd`.

        A leader's AppendEntries / InstallSnapshot / TimeoutNow carry entries
        and a term it already holds; sending them while its own disk write
        runs is safe (Raft thesis, 10.2.1) because the leader counts its own
        copy only when it handles the acks, which this loop does only after
        the round's fsync has returned. Not when this Ready changes the term
        or vote: those must be durable before anyone hears of them. Votes and
        acks (responses) always wait for the fsync.
        """
        if self.vote_changed or not rd.messages:
            return []
        early: list[Message] = [m for m in rd.messages if isinstance(m, _LEADER_MSGS)]
        if early:
            rd.messages = [m for m in rd.messages if not isinstance(m, _LEADER_MSGS)]
        return early

    def apply(self, rd: Ready) -> list[Applied]:
        """Apply a Ready's snapshot and committed entries; answer their waiters.

        Returns (index, log digest, content digest) for each applied index
        that calls for an `applied` audit event.
        """
        if rd.snapshot is not None and rd.snapshot.meta.index > self.sm.applied:
            self.sm.restore(rd.snapshot.data, rd.snapshot.meta.index)
            self.moved_ns = time.monotonic_ns()
            self._fail_waiters_upto(rd.snapshot.meta.index)
        return self.apply_entries(rd.committed_entries, rd.change_results)

    def durable_committed(self, rd: Ready) -> list[Entry]:
        """The prefix of a Ready's committed entries already durable here.

        They can be applied, and their clients answered, before this Ready's
        own fsync: they are committed, and this node persisted them in an
        earlier round (index at most the log's stable end, and below any
        entry this Ready rewrites). That takes one fsync off a write's path.
        """
        if rd.snapshot is not None or not rd.committed_entries:
            return []
        limit = self.raw.log.stable_last
        if rd.entries:
            limit = min(limit, rd.entries[0].index - 1)
        return [e for e in rd.committed_entries if e.index <= limit]

    def apply_durable(self) -> list[Applied]:
        """Apply committed entries persisted in earlier rounds, between Readies.

        The RawNode hands them out again in its next Ready; `apply_entries`
        skips what is applied. Nothing while a snapshot waits to be installed
        (it must come first), and only entries up to the log's stable end,
        which a truncation lowers at once, so never one this round rewrites.
        """
        log = self.raw.log
        if log.pending_snapshot is not None or self.sm.applied < log.offset:
            return []
        upto = min(log.committed, log.stable_last)
        if upto <= self.sm.applied:
            return []
        return self.apply_entries(log.slice(self.sm.applied + 1, upto + 1))

    def apply_entries(
        self, entries: list[Entry], change_results: Sequence[ChangeResult] = ()
    ) -> list[Applied]:
        """Apply committed entries not applied yet, answering their waiters."""
        digests: list[Applied] = []
        before = self.sm.applied
        for entry in entries:
            if entry.index <= self.sm.applied:
                continue
            result = self.sm.apply(entry)
            for observer in OBSERVERS:
                observer.on_applied(self.raw.id, self.id, entry)
            waiter = self.waiters.pop(entry.index, None)
            if waiter is not None and not waiter[1].done():
                if waiter[0] == entry.term:
                    waiter[1].set_result(result)
                else:
                    waiter[1].set_exception(
                        ProposalDropped(f"index {entry.index} committed from term {entry.term}")
                    )
            if entry.index % DIGEST_EVERY == 0:
                digests.append((entry.index, self.sm.digest, self.sm.content_digest()))
        if self.sm.applied != before:
            self.moved_ns = time.monotonic_ns()
        for res in change_results:
            fut = self.tickets.pop(res.ticket, None)
            if fut is not None and not fut.done():
                fut.set_result(res)
        return digests

    def _fail_waiters_upto(self, index: int) -> None:
        # A snapshot skipped these indexes: we cannot tell whether our entries
        # are in it, so their outcome is unknown.
        for idx in [i for i in self.waiters if i <= index]:
            _, fut = self.waiters.pop(idx)
            if not fut.done():
                fut.set_exception(OutcomeUnknown(f"index {idx} was covered by a snapshot"))

    def maybe_compact(self) -> None:
        """Every `compact_every` applied entries, compact the log to the previous mark.

        The state is captured at one mark and the log compacted to it at the
        next, so a tail of about `compact_every` entries stays and only peers
        lagging further behind need a snapshot (as the simulator does).
        """
        applied = self.sm.applied
        mark = self._snap_mark
        if not self.compact_every or applied < (mark[0] if mark else 0) + self.compact_every:
            return
        if mark is not None and mark[0] > self.raw.log.offset:
            snap = self.raw.compact(mark[0], mark[1])
            self.storage.save(snapshot=snap)
        self._snap_mark = (applied, self.sm.snapshot())

    def status(self) -> dict[str, Any]:
        """The group's state for /admin/status (cheap: no log walk)."""
        st = self.raw.status()
        conf = st.conf
        return {
            "role": st.role,
            "term": st.term,
            "leader": st.leader,
            "commit": st.commit,
            # A leader serves reads and changes only once an entry of its own
            # term is committed; clients and tests wait on this, not on role.
            "commit_term": self.raw.log.term(st.commit),
            "applied": st.applied,
            "last_index": st.last_index,
            "snapshot_index": self.raw.log.offset,
            "conf": {
                "peers": list(conf.peers),
                "old_peers": list(conf.old_peers) if conf.old_peers is not None else None,
                "learners": list(conf.learners),
                "joint": conf.is_joint,
            },
            "stage": st.stage,
            "token": st.token,
            "progress": st.progress,
        }


def _fail(reads: list[PendingRead], err: Exception) -> None:
    for read in reads:
        if not read.future.done():
            read.future.set_exception(err)
