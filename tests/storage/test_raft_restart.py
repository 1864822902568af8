"""The real Raft core persisted through NodeStorage restarts where it left off."""

from __future__ import annotations

import random
from pathlib import Path

from ember.raft import ConfState, Message, RaftConfig, RawNode, Snapshot, SnapshotMeta
from ember.storage import NodeStorage

NODES = ("n1", "n2", "n3")
GROUPS = ("g1", "g2", "g3")
CONF = ConfState(peers=NODES)


class Cluster:
    """Three nodes, three groups each, one store per node, messages in memory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.rng = random.Random(42)
        self.stores = {n: NodeStorage(root / n) for n in NODES}
        for store in self.stores.values():
            # The bootstrap configuration has no log entry: record it as the
            # empty snapshot at index 0 so a restart needs nothing but the store.
            for g in GROUPS:
                store.group(g).save(
                    snapshot=Snapshot(meta=SnapshotMeta(index=0, term=0, conf=CONF))
                )
            store.commit()
        self.rafts = {n: self._rafts(n, fresh=True) for n in NODES}
        self.inflight: list[Message] = []

    def _rafts(self, node: str, *, fresh: bool) -> dict[str, RawNode]:
        config = RaftConfig()
        store = self.stores[node]
        return {
            g: RawNode(node, g, config, random.Random(f"{node}{g}"), conf=CONF)
            if fresh
            else RawNode(
                node, g, config, random.Random(f"{node}{g}"), persisted=store.group(g).load()
            )
            for g in GROUPS
        }

    def round(self) -> None:
        """Deliver, tick, then per node: persist every group's Ready, one commit, send."""
        msgs, self.inflight = self.inflight, []
        for m in msgs:
            self.rafts[m.dst][m.group].step(m)
        for node, rafts in self.rafts.items():
            readies = []
            for g, raft in rafts.items():
                raft.tick()
                if raft.has_ready():
                    rd = raft.ready()
                    self.stores[node].group(g).save(rd.entries, rd.hard_state, rd.snapshot)
                    readies.append((raft, rd))
            self.stores[node].commit()
            for raft, rd in readies:
                self.inflight.extend(rd.messages)
                raft.advance(rd)

    def leader(self, group: str) -> RawNode | None:
        for rafts in self.rafts.values():
            if rafts[group].status().role == "leader":
                return rafts[group]
        return None

    def restart(self, node: str) -> None:
        """Crash `node` (memory lost) and bring it back from its store alone."""
        self.stores[node].close()
        self.stores[node] = NodeStorage(self.root / node)
        self.rafts[node] = self._rafts(node, fresh=False)

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


def drive_writes(cluster: Cluster, count: int) -> None:
    for _ in range(count):
        for g in GROUPS:
            leader = cluster.leader(g)
            if leader is not None:
                leader.propose(f"{g}-write".encode())
        cluster.round()


def test_restarted_node_resumes_from_its_store(tmp_path: Path) -> None:
    """A node rebuilt from NodeStorage has its term, vote, commit and log, and catches up."""
    cluster = Cluster(tmp_path)
    try:
        for _ in range(100):
            cluster.round()
        drive_writes(cluster, 30)
        for _ in range(5):
            cluster.round()
        # Compact one group locally: the core keeps the snapshot; the driver persists it.
        raft = cluster.rafts["n3"]["g1"]
        raft.compact(raft.status().applied - 3, b"app-state")
        cluster.stores["n3"].group("g1").save(snapshot=raft.log.snapshot)
        cluster.stores["n3"].commit()
        before = {g: r.status() for g, r in cluster.rafts["n3"].items()}
        cluster.restart("n3")
        after = {g: r.status() for g, r in cluster.rafts["n3"].items()}
        for g in GROUPS:
            assert (after[g].term, after[g].last_index) == (before[g].term, before[g].last_index)
            assert after[g].conf == before[g].conf
            assert after[g].commit == before[g].commit
        assert cluster.stores["n3"].group("g1").load().snapshot.data == b"app-state"  # type: ignore[union-attr]
        drive_writes(cluster, 20)
        for _ in range(20):
            cluster.round()
        for g in GROUPS:
            leader = cluster.leader(g)
            assert leader is not None
            assert cluster.rafts["n3"][g].status().last_index == leader.status().last_index
            assert cluster.rafts["n3"][g].status().commit == leader.status().commit
    finally:
        cluster.close()
