"""A tiny deterministic driver for RawNodes, independent of ember/sim.

Each node is drained with the API's loop (ready, persist, send, apply,
advance) into an in-memory "disk"; messages queue in a FIFO per destination
and are delivered in node-id order, so every run of a script is identical.
Links can be cut, and a filter can drop messages of chosen types.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from ember.raft import (
    ConfState,
    Entry,
    HardState,
    Message,
    PersistedState,
    RaftConfig,
    RawNode,
    Ready,
    Snapshot,
)
from ember.raft.describe import describe_message


class Disk:
    """What one node persisted, plus what it applied."""

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []
        self.applied: list[Entry] = []

    def persisted(self) -> PersistedState:
        """The state a restarting node reads back."""
        return PersistedState(
            hard_state=self.hard_state, snapshot=self.snapshot, entries=list(self.entries)
        )


class Net:
    """Nodes of one group, their disks, and the messages in flight."""

    def __init__(
        self,
        ids: Iterable[str],
        voters: Iterable[str] | None = None,
        learners: Iterable[str] = (),
        config: RaftConfig | None = None,
        seed: int = 1,
    ) -> None:
        self.config = config or RaftConfig(election_timeout_ticks=10)
        self.seed = seed
        ids = list(ids)
        conf = ConfState(
            peers=tuple(sorted(voters if voters is not None else ids)),
            learners=tuple(sorted(learners)),
        )
        members = set(conf.peers) | set(conf.learners)
        self.boot_conf = conf
        self.members = members
        self.nodes: dict[str, RawNode] = {}
        self.disks: dict[str, Disk] = {}
        for i in sorted(ids):
            self.disks[i] = Disk()
            self.nodes[i] = RawNode(
                i,
                "g",
                self.config,
                random.Random(f"{seed}-{i}"),
                conf=conf if i in members else None,
            )
        self.queue: list[Message] = []
        self.cut: set[frozenset[str]] = set()
        self.down: set[str] = set()
        self.drop: Callable[[Message], bool] = lambda m: False
        self.events: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        self.results: list[Any] = []
        self.log: list[str] = []  # delivered messages, described

    def add(self, node_id: str) -> None:
        """A fresh, empty node that waits for the leader."""
        self.disks[node_id] = Disk()
        self.events[node_id] = []
        self.nodes[node_id] = RawNode(
            node_id, "g", self.config, random.Random(f"{self.seed}-{node_id}")
        )

    def restart(self, node_id: str) -> None:
        """Crash and restart a node from its disk (in-flight state is lost)."""
        self.nodes[node_id] = RawNode(
            node_id,
            "g",
            self.config,
            random.Random(f"{self.seed}-{node_id}-r"),
            persisted=self.disks[node_id].persisted(),
            # The bootstrap configuration is not in the log: pass it again.
            conf=self.boot_conf if node_id in self.members else None,
        )
        self.disks[node_id].applied = []

    def drain(self, node_id: str) -> None:
        """Run the Ready loop of one node until it has nothing more."""
        node = self.nodes[node_id]
        while node.has_ready():
            self.handle(node_id, node.ready())

    def handle(self, node_id: str, rd: Ready) -> None:
        """Persist, send and apply one Ready of `node_id`, then advance it."""
        node, disk = self.nodes[node_id], self.disks[node_id]
        if rd.snapshot is not None:
            disk.snapshot = rd.snapshot
            disk.entries = []
            disk.applied = []
        if rd.entries:
            first = rd.entries[0].index  # an existing index truncates from there
            base = disk.entries[0].index if disk.entries else first
            disk.entries = disk.entries[: max(first - base, 0)] + rd.entries
        if rd.hard_state is not None:
            disk.hard_state = rd.hard_state
        self.queue.extend(rd.messages)
        disk.applied.extend(rd.committed_entries)
        self.events[node_id].extend(rd.events)
        self.results.extend(rd.change_results)
        node.advance(rd)

    def drain_all(self) -> None:
        """Drain every node that is up."""
        for i in sorted(self.nodes):
            if i not in self.down:
                self.drain(i)

    def deliver(self, max_rounds: int = 1000) -> int:
        """Deliver messages until none are in flight; returns how many."""
        count = 0
        self.drain_all()
        for _ in range(max_rounds):
            if not self.queue:
                break
            batch, self.queue = self.queue, []
            for m in batch:
                if m.dst in self.down or m.src in self.down or m.dst not in self.nodes:
                    continue
                if frozenset((m.src, m.dst)) in self.cut or self.drop(m):
                    continue
                self.log.append(describe_message(m))
                self.nodes[m.dst].step(m)
                count += 1
            self.drain_all()
        return count

    def tick(self, node_id: str | None = None, times: int = 1) -> None:
        """Tick one node (or all that are up) `times` times, delivering after each."""
        for _ in range(times):
            for i in sorted(self.nodes):
                if (node_id is None or i == node_id) and i not in self.down:
                    self.nodes[i].tick()
            self.deliver()

    def elect(self, node_id: str) -> None:
        """Make `node_id` campaign now (as if its timeout fired) and settle."""
        node = self.nodes[node_id]
        for _ in range(100):
            if node.role == "leader":
                return
            node.tick()
            self.deliver()
        raise AssertionError(f"{node_id} did not become leader")

    def leader(self) -> RawNode | None:
        """The up node that believes it leads with the highest term."""
        leaders = [n for i, n in self.nodes.items() if n.role == "leader" and i not in self.down]
        return max(leaders, key=lambda n: n.term) if leaders else None

    def partition(self, a: Iterable[str], b: Iterable[str]) -> None:
        """Cut every link between group `a` and group `b`."""
        for x in a:
            for y in b:
                self.cut.add(frozenset((x, y)))

    def heal(self) -> None:
        """Restore every link."""
        self.cut.clear()

    def kinds(self, node_id: str, kind: str) -> list[dict[str, Any]]:
        """Events of one kind that `node_id` emitted."""
        return [e for e in self.events[node_id] if e["kind"] == kind]
