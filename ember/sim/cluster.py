"""The simulated cluster: nodes, their disks, the network and the driver loop.

Theory of operation: every node is a RawNode driven by the loop of
docs/raft-api.md, one event at a time on the virtual clock. A node that has a
Ready writes it to its disk's `written` view and becomes *busy* for the
fsync latency; only when the fsync completes does the driver make it durable,
send the messages, apply committed entries and `advance`. Audit events are
recorded when the Ready is taken, so a run stopped by a violation keeps them. A
busy or paused node buffers what arrives (messages, client requests) in its
backlog and counts missed ticks, then handles them in order when it is free
again, like a single-threaded process blocked on fsync or SIGSTOP'd.

A crash drops the RawNode, the state machine, the backlog and the unflushed
write (the messages of that Ready were never sent). A restart builds a new
RawNode from the durable state only. Every handled event goes into the trace.

The cluster reports what it sees to an `Observer` (the invariant checker and
the workload), which is how properties are checked after every step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ember.raft import (
    ChangeResult,
    ConfState,
    Entry,
    Message,
    RaftConfig,
    RaftError,
    RawNode,
    Ready,
    Snapshot,
    SnapshotMeta,
    Status,
)
from ember.sim.clock import NS_PER_MS, VirtualClock
from ember.sim.events import envelope, start_events
from ember.sim.network import Network
from ember.sim.statemachine import StateMachine
from ember.sim.storage import DiskLog
from ember.sim.trace import Trace

GROUP = "g0"
# An `applied` audit event (index, digest) every this many applied entries, at
# the same indexes on every node, so the convergence checker can compare them.
DIGEST_EVERY = 50
_msg_encoder = msgspec.msgpack.Encoder()

# A client request queued on a busy node: run it, then report to the callback.
ClientCall = tuple[Callable[[RawNode], Any], Callable[[Any], None]]


class Observer:
    """Hooks the cluster calls; the no-op base lets each observer pick its own."""

    def on_write(self, node: SimNode, rd: Ready) -> None:
        """A Ready's entries/snapshot/hard state were written (not yet fsync'd)."""

    def on_durable(self, node: SimNode, rd: Ready) -> None:
        """A Ready's write became durable; its messages are about to be sent."""

    def on_applied(self, node: SimNode, entry: Entry) -> None:
        """`node` applied `entry` to its state machine."""

    def on_status(self, node: SimNode, status: Status) -> None:
        """`node` finished handling an event; `status` is its state now."""

    def on_change_result(self, node: SimNode, result: ChangeResult) -> None:
        """A change_peers request submitted to `node` ended."""

    def on_crash(self, node: SimNode) -> None:
        """`node` crashed: its in-memory state, tickets and proposals are gone."""


@dataclass(slots=True, kw_only=True)
class NodeTiming:
    """Per-node timing drawn from the clock sub-seed."""

    tick_ns: int
    fsync_min_ns: int
    fsync_max_ns: int


class SimNode:
    """One simulated process: RawNode + disk + state machine + backlog."""

    def __init__(self, node_id: str, bootstrap: ConfState | None, timing: NodeTiming) -> None:
        self.id = node_id
        self.timing = timing
        snap = None
        if bootstrap is not None:
            # The bootstrap configuration is a snapshot at index 0, so a restart
            # before the first configuration entry still knows its voters.
            snap = Snapshot(meta=SnapshotMeta(index=0, term=0, conf=bootstrap))
        self.durable = DiskLog(snap)
        self.written = self.durable.copy()
        self.raw: RawNode | None = None
        self.sm = StateMachine()
        self.up = False
        self.paused = False
        self.busy: Ready | None = None
        self.incarnation = 0
        self.backlog: list[Message | ClientCall] = []
        self.missed_ticks = 0
        self.status: Status | None = None
        self.events: list[dict[str, Any]] = []
        self.crashes = 0
        # (index, state bytes) captured for the next compaction.
        self.snap_mark: tuple[int, bytes] | None = None
        # Entries the last write truncated from `written` (for the checker).
        self.removed: list[Entry] = []


class Cluster:
    """Nodes on a virtual clock and a simulated network, driven step by step."""

    def __init__(
        self,
        *,
        voters: Sequence[str],
        spares: Sequence[str],
        config: RaftConfig,
        clock: VirtualClock,
        network: Network,
        clock_rng: random.Random,
        node_rngs: dict[str, random.Random],
        trace: Trace,
        observer: Observer,
        compact_every: int = 0,
    ) -> None:
        self.config = config
        self.clock = clock
        self.network = network
        self.trace = trace
        self.observer = observer
        self.compact_every = compact_every
        self.clock_rng = clock_rng
        self.node_rngs = node_rngs
        bootstrap = ConfState(peers=tuple(sorted(voters)))
        self.nodes: dict[str, SimNode] = {}
        for node_id in [*voters, *spares]:
            # Clock drift: each node ticks every 10 ms +-5%, like real timers.
            timing = NodeTiming(
                tick_ns=int(10 * NS_PER_MS * clock_rng.uniform(0.95, 1.05)),
                fsync_min_ns=int(0.1 * NS_PER_MS),
                fsync_max_ns=int(clock_rng.uniform(0.5, 3.0) * NS_PER_MS),
            )
            is_voter = node_id in voters
            self.nodes[node_id] = SimNode(node_id, bootstrap if is_voter else None, timing)

    # -- lifecycle -------------------------------------------------------

    def start(self, node_id: str) -> None:
        """Start (or restart) a node from its durable state."""
        node = self.nodes[node_id]
        if node.up:
            return
        node.incarnation += 1
        node.up, node.paused, node.busy = True, False, None
        node.backlog, node.missed_ticks = [], 0
        node.written = node.durable.copy()
        node.sm = StateMachine()
        node.snap_mark = None
        persisted = node.durable.persisted()
        if persisted is not None and persisted.snapshot is not None:
            node.sm.restore(persisted.snapshot.data, persisted.snapshot.meta.index)
        rng = random.Random(self.node_rngs[node_id].getrandbits(64))
        node.raw = RawNode(node_id, GROUP, self.config, rng, persisted=persisted)
        self.trace.record(self.clock.now_ns, "start", node_id, node.incarnation)
        self._record_start(node)
        first = self.clock_rng.randrange(node.timing.tick_ns)
        self.clock.after(first, "tick", (node_id, node.incarnation))
        self._after_activity(node)

    def crash(self, node_id: str) -> None:
        """Kill a node: everything not durable is lost."""
        node = self.nodes[node_id]
        if not node.up:
            return
        self.trace.record(self.clock.now_ns, "crash", node_id, node.busy is not None)
        node.up, node.paused, node.busy, node.raw = False, False, None, None
        node.backlog, node.missed_ticks = [], 0
        node.written = node.durable.copy()
        node.status = None
        node.crashes += 1
        self.observer.on_crash(node)

    def pause(self, node_id: str) -> None:
        """SIGSTOP: the node neither ticks nor handles anything until resumed."""
        node = self.nodes[node_id]
        if node.up and not node.paused:
            node.paused = True
            self.trace.record(self.clock.now_ns, "pause", node_id)

    def resume(self, node_id: str) -> None:
        """SIGCONT: handle what arrived while paused."""
        node = self.nodes[node_id]
        if node.up and node.paused:
            node.paused = False
            self.trace.record(self.clock.now_ns, "resume", node_id)
            self._free(node)

    # -- events ------------------------------------------------------------

    def handle(self, kind: str, payload: Any) -> bool:
        """Run one cluster event; False if `kind` is not the cluster's."""
        if kind == "tick":
            self._on_tick(*payload)
        elif kind == "deliver":
            self._on_deliver(payload)
        elif kind == "fsync":
            self._on_fsync(*payload)
        else:
            return False
        return True

    def _on_tick(self, node_id: str, incarnation: int) -> None:
        node = self.nodes[node_id]
        if not node.up or node.incarnation != incarnation:
            return
        self.clock.after(node.timing.tick_ns, "tick", (node_id, incarnation))
        if node.paused:
            return  # a stopped process's timers do not run
        if node.busy is not None:
            node.missed_ticks += 1
            return
        assert node.raw is not None
        node.raw.tick()
        self._after_activity(node)

    def _on_deliver(self, msg: Message) -> None:
        node = self.nodes.get(msg.dst)
        if node is None or not self.network.may_deliver(msg.src, msg.dst) or not node.up:
            return
        self.trace.record(self.clock.now_ns, "deliver", msg.dst, _msg_encoder.encode(msg))
        if node.paused or node.busy is not None:
            node.backlog.append(msg)
            return
        assert node.raw is not None
        node.raw.step(msg)
        self._after_activity(node)

    def call(self, node_id: str, fn: Callable[[RawNode], Any], done: Callable[[Any], None]) -> None:
        """A client request: run `fn(raw)` on the node, report result or error.

        A request to a node that is down fails at once with ConnectionError; to a
        busy or paused node it waits in the backlog.
        """
        node = self.nodes[node_id]
        if not node.up:
            done(ConnectionError(f"{node_id} is down"))
            return
        if node.paused or node.busy is not None:
            node.backlog.append((fn, done))
            return
        self._run_call(node, (fn, done))
        self._after_activity(node)

    def _run_call(self, node: SimNode, item: ClientCall) -> None:
        fn, done = item
        assert node.raw is not None
        try:
            result: Any = fn(node.raw)
        except RaftError as err:
            result = err
        done(result)

    def _free(self, node: SimNode) -> None:
        """Handle the backlog and missed ticks of a node that became free."""
        assert node.raw is not None
        backlog, node.backlog = node.backlog, []
        for item in backlog:
            if isinstance(item, tuple):
                self._run_call(node, item)
            else:
                node.raw.step(item)
        for _ in range(node.missed_ticks):
            node.raw.tick()
        node.missed_ticks = 0
        self._after_activity(node)

    # -- the driver loop -----------------------------------------------------

    def _after_activity(self, node: SimNode) -> None:
        """Take the next Ready, if any, and start its fsync; then report status."""
        if node.up and not node.paused and node.busy is None:
            assert node.raw is not None
            if node.raw.has_ready():
                rd = node.raw.ready()
                for event in rd.events:
                    self._record_event(node, event)
                node.removed = node.written.write(rd.snapshot, rd.entries, rd.hard_state)
                node.busy = rd
                self.observer.on_write(node, rd)
                lo, hi = node.timing.fsync_min_ns, node.timing.fsync_max_ns
                latency = self.clock_rng.randint(lo, hi)
                self.clock.after(latency, "fsync", (node.id, node.incarnation))
            node.status = node.raw.status()
            self.observer.on_status(node, node.status)

    def _on_fsync(self, node_id: str, incarnation: int) -> None:
        node = self.nodes[node_id]
        if not node.up or node.incarnation != incarnation or node.busy is None:
            return
        rd, node.busy = node.busy, None
        node.durable.write(rd.snapshot, rd.entries, rd.hard_state)
        self.trace.record(self.clock.now_ns, "fsync", node_id, _ready_digest(rd))
        self.observer.on_durable(node, rd)
        for msg in rd.messages:
            for at in self.network.send(msg.src, msg.dst, self.clock.now_ns):
                self.clock.schedule(at, "deliver", msg)
        self._apply(node, rd)
        for result in rd.change_results:
            detail = msgspec.to_builtins(result)
            self.trace.record(self.clock.now_ns, "change-result", node_id, detail)
            self.observer.on_change_result(node, result)
        assert node.raw is not None
        node.raw.advance(rd)
        self._maybe_compact(node)
        self._free(node)

    def _apply(self, node: SimNode, rd: Ready) -> None:
        if rd.snapshot is not None and rd.snapshot.meta.index > node.sm.applied:
            node.sm.restore(rd.snapshot.data, rd.snapshot.meta.index)
        for entry in rd.committed_entries:
            if entry.index <= node.sm.applied:
                continue
            node.sm.apply(entry)
            self.observer.on_applied(node, entry)
            if entry.index % DIGEST_EVERY == 0:
                self.emit_applied(node)

    def _maybe_compact(self, node: SimNode) -> None:
        """Every `compact_every` applied entries, compact to the previous mark.

        The state is captured at one mark and the log compacted to it at the
        next, so a tail of about `compact_every` entries stays in the log and
        only peers lagging further behind need a snapshot.
        """
        applied = node.sm.applied
        mark = node.snap_mark
        if not self.compact_every or applied < (mark[0] if mark else 0) + self.compact_every:
            return
        if mark is not None and mark[0] > node.durable.snap_index:
            assert node.raw is not None
            snapshot = node.raw.compact(mark[0], mark[1])
            node.durable.compact(snapshot)
            node.written.compact(snapshot)
            self.trace.record(self.clock.now_ns, "compact", node.id, mark[0])
        node.snap_mark = (applied, node.sm.snapshot())

    def emit_applied(self, node: SimNode) -> None:
        """Record an `applied` audit event with the state machine's digest."""
        term = node.status.term if node.status else node.durable.hard_state.term
        self._record_event(
            node,
            {"kind": "applied", "term": term, "index": node.sm.applied, "digest": node.sm.digest},
        )

    def _record_start(self, node: SimNode) -> None:
        """Record what the node daemon records when it starts (ember/sim/events.py)."""
        assert node.raw is not None
        node.events.extend(start_events(node.raw, node.id, self.clock.now_ns, GROUP))

    def _record_event(self, node: SimNode, event: dict[str, Any]) -> None:
        """Add the envelope fields the driver owns (docs/events.md) and keep it."""
        node.events.append(envelope(event, node.id, self.clock.now_ns, GROUP))

    # -- queries -------------------------------------------------------------

    def up_nodes(self) -> list[SimNode]:
        """Nodes that are running (paused ones included)."""
        return [n for n in self.nodes.values() if n.up]

    def leaders(self) -> list[SimNode]:
        """Running nodes that believe they lead, highest term first."""
        found = [n for n in self.nodes.values() if n.up and n.status and n.status.role == "leader"]
        return sorted(found, key=lambda n: -(n.status.term if n.status else 0))


def _ready_digest(rd: Ready) -> tuple[Any, ...]:
    """A compact, deterministic summary of a Ready for the trace."""
    return (
        [(e.index, e.term) for e in rd.entries],
        msgspec.to_builtins(rd.hard_state),
        rd.snapshot.meta.index if rd.snapshot else None,
        [e.index for e in rd.committed_entries],
        len(rd.messages),
    )


__all__ = ["GROUP", "Cluster", "Observer", "SimNode"]
