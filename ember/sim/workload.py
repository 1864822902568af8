"""The simulated clients: proposals and random change_peers requests.

Theory of operation: the workload is driven by the runner's events
("propose", "change") and draws every choice from the workload sub-seed.
Proposals go to the node that leads now (an omniscient client; a real one
would follow NotLeader hints), each with a unique `k<i>=<n>` value. A
proposal is *acknowledged* when the node it went to applies that very entry
at the returned index; a different entry there means it failed, a crash
means unknown. Membership changes are one at a time: add, remove, replace,
disjoint move, learner add/remove/promote, each computed from the
configuration in force and the universe of nodes. Every request gets a fresh,
increasing token. A ticket ends with its ChangeResult, or is lost with the
node it was submitted to (the client sees the connection drop).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from ember.raft import ChangeResult, ChangeTicket, ConfState, Entry, RaftError
from ember.sim.clients import ClientOp, read_data
from ember.sim.cluster import Cluster, Observer, SimNode

CHANGE_KINDS: tuple[str, ...] = (
    "add",
    "remove",
    "replace",
    "move",
    "add-learner",
    "remove-learner",
    "promote",
)


@dataclass(slots=True)
class Change:
    """One change_peers request and how it ended."""

    kind: str
    token: int
    node: str
    peers: tuple[str, ...]
    learners: tuple[str, ...]
    submitted_ns: int
    ticket: int | None = None
    outcome: str | None = None  # "ok", an error status, "rejected: ...", "lost"
    ended_ns: int | None = None


@dataclass(slots=True)
class WorkloadStats:
    """Counts for the summary."""

    proposed: int = 0
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    rejected: int = 0
    changes: dict[str, int] = field(default_factory=dict)


class Workload(Observer):
    """Client behaviour; also an observer, to see applies and change results."""

    def __init__(
        self, cluster_ref: list[Cluster], rng: random.Random, universe: list[str], min_voters: int,
        *, reads: float = 0.0, read_rng: random.Random | None = None, local_reads: bool = False,
    ) -> None:  # fmt: skip
        self._cluster_ref = cluster_ref
        self.rng = rng
        # Reads draw from their own generator: a run without reads makes
        # exactly the draws it made before reads existed (same traces).
        self.reads = reads
        self.read_rng = read_rng or random.Random(0)
        # Planted client defect: reads served from whichever node believes it
        # leads (as a client with a stale leader cache would), off its state
        # machine, without the log: a deposed leader answers stale values.
        self.local_reads = local_reads
        self.ops: list[ClientOp] = []
        self.universe = universe
        self.min_voters = min_voters
        self.stats = WorkloadStats()
        self.changes: list[Change] = []
        self.token = 0
        self._seq = 0
        # node -> {index: (data, op)} proposals awaiting their apply on that node.
        self.inflight: dict[str, dict[int, tuple[bytes, ClientOp]]] = {}
        self.acked: list[tuple[int, bytes]] = []
        self.current: Change | None = None

    @property
    def cluster(self) -> Cluster:
        return self._cluster_ref[0]

    # -- proposals ---------------------------------------------------------

    def propose(self) -> None:
        """Send one proposal (a put, or a read through the log) to the current leader."""
        leaders = self.cluster.leaders()
        self._seq += 1
        now = self.cluster.clock.now_ns
        if self.reads > 0 and self.read_rng.random() < self.reads:
            key = f"k{self.read_rng.randrange(8)}"
            op = ClientOp(self._seq, "get", key, None, now)
            data = read_data(key, self._seq)
            if self.local_reads and leaders:
                values = self.read_rng.choice(leaders).sm.values(key)
                self.ops.append(op)
                op.complete("ok", now, result=int(values[-1]) if values else None)
                return
        else:
            key = f"k{self._seq % 8}"
            op = ClientOp(self._seq, "put", key, self._seq, now)
            data = f"{key}={self._seq}".encode()
        self.ops.append(op)
        self.stats.proposed += 1
        if not leaders:
            self.stats.rejected += 1
            op.complete("fail", now, error="no leader")
            return
        node = leaders[0].id

        def done(result: Any) -> None:
            if isinstance(result, int):
                self.inflight.setdefault(node, {})[result] = (data, op)
            else:
                self.stats.rejected += 1
                op.complete("fail", self.cluster.clock.now_ns, error=type(result).__name__)

        self.cluster.call(node, lambda raw: raw.propose(data), done)

    def on_applied(self, node: SimNode, entry: Entry) -> None:
        waiting = self.inflight.get(node.id)
        if not waiting:
            return
        item = waiting.pop(entry.index, None)
        if item is None:
            return
        data, op = item
        now = self.cluster.clock.now_ns
        if entry.kind == "normal" and entry.data == data:
            self.stats.acked += 1
            if op.f == "get":
                values = node.sm.values(op.key)
                op.complete("ok", now, result=int(values[-1]) if values else None)
            else:
                self.acked.append((entry.index, data))  # writes: checked after convergence
                op.complete("ok", now)
        else:
            self.stats.failed += 1
            op.complete("fail", now, error="overwritten")

    def on_crash(self, node: SimNode) -> None:
        lost = self.inflight.pop(node.id, {})
        self.stats.unknown += len(lost)
        for _data, op in lost.values():
            op.complete("info", self.cluster.clock.now_ns, error="node crashed")
        cur = self.current
        if cur is not None and cur.node == node.id and cur.outcome is None:
            self._end(cur, "lost")

    # -- membership changes --------------------------------------------------

    def change(self) -> None:
        """Submit one random membership change if none is in flight."""
        if self.current is not None:
            return
        leaders = self.cluster.leaders()
        if not leaders or leaders[0].status is None:
            return
        leader, conf = leaders[0], leaders[0].status.conf
        if conf.is_joint:
            return
        kind = self.rng.choice(CHANGE_KINDS)
        target = self._target(kind, conf)
        if target is None:
            return
        peers, learners = target
        self.token += 1
        change = Change(kind, self.token, leader.id, peers, learners, self.cluster.clock.now_ns)
        self.current = change
        self.changes.append(change)

        def done(result: Any) -> None:
            if isinstance(result, ChangeTicket):
                change.ticket = result.id
                if result.result is not None:
                    self._finish(change, result.result)
            elif isinstance(result, RaftError | ConnectionError):
                self._end(change, f"rejected: {type(result).__name__}")
            else:
                raise TypeError(f"change_peers returned {result!r}")

        self.cluster.call(
            leader.id,
            lambda raw: raw.change_peers(peers, learners, token=change.token),
            done,
        )

    def _target(self, kind: str, conf: ConfState) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        voters, learners = list(conf.peers), list(conf.learners)
        outside = [n for n in self.universe if n not in voters and n not in learners]
        pick = self.rng.choice
        if kind == "add" and outside:
            voters.append(pick(outside))
        elif kind == "remove" and len(voters) > self.min_voters:
            voters.remove(pick(voters))
        elif kind == "replace" and outside:
            voters.remove(pick(voters))
            voters.append(pick(outside))
        elif kind == "move" and len(outside) >= len(voters):
            voters = self.rng.sample(outside, len(voters))
        elif kind == "add-learner" and outside:
            learners.append(pick(outside))
        elif kind == "remove-learner" and learners:
            learners.remove(pick(learners))
        elif kind == "promote" and learners:
            node = pick(learners)
            learners.remove(node)
            voters.append(node)
        else:
            return None
        return tuple(sorted(voters)), tuple(sorted(learners))

    def on_change_result(self, node: SimNode, result: ChangeResult) -> None:
        cur = self.current
        if cur is not None and cur.node == node.id and cur.ticket == result.ticket:
            self._finish(cur, result)

    def _finish(self, change: Change, result: ChangeResult) -> None:
        self._end(change, "ok" if result.ok else f"error {result.status}")

    def _end(self, change: Change, outcome: str) -> None:
        change.outcome = outcome
        change.ended_ns = self.cluster.clock.now_ns
        self.stats.changes[outcome] = self.stats.changes.get(outcome, 0) + 1
        if self.current is change:
            self.current = None

    def joining(self) -> list[str]:
        """Peers the change in flight is adding (the nemesis targets them)."""
        cur = self.current
        if cur is None:
            return []
        leaders = self.cluster.leaders()
        have = set(leaders[0].status.conf.peers) if leaders and leaders[0].status else set()
        return [p for p in cur.peers if p not in have]
