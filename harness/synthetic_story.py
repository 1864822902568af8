"""The audit-event story of a synthetic run (see harness.synthetic).

Five nodes, two groups and, as fractions of the run's duration: a partition
that isolates part-1's leader, a kill and restart, and part-0's change of
peers through catching-up, joint and stable (driven by a rebalance whose
assignment keys are written with revisions). `AuditStory` emits each
node's events (docs/events.md) for that story; the history side lives in
harness.synthetic and uses the same windows.
"""

from __future__ import annotations

import hashlib
from typing import Any

NODES = ("n1", "n2", "n3", "n4", "n5")
OLD_PART0, NEW_PART0, PART1 = ("n1", "n2", "n3"), ("n1", "n3", "n4"), ("n3", "n4", "n5")
CLIENTS = 5
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
ZONE = 1
# Windows as fractions of the run's duration (see the module doc).
PARTITION, KILL, CHANGE = (0.15, 0.35), (0.45, 0.65), (0.50, 0.60)
MONO_AT_ZERO = 7 * 3600 * NS_PER_S  # the harness's monotonic reading at the history's zero
QUIET_FRACTION = 0.15  # of D; traffic runs to ~0.9 D, the last fault ends at 0.65 D


def window(end: int, span: tuple[float, float]) -> tuple[int, int]:
    return int(span[0] * end), int(span[1] * end)


class AuditStory:
    """Builds each node's audit events (docs/events.md) for the run's story."""

    def __init__(self, wall0: float, end: int, seed: int) -> None:
        self.wall0, self.end, self.seed = wall0, end, seed
        self.events: list[tuple[int, int, dict[str, Any]]] = []

    def emit(self, t: int, node: str, kind: str, group: str | None = None, **fields: Any) -> None:
        """Appends one event at history time `t` (ns)."""
        ev: dict[str, Any] = {"kind": kind, "node": node}
        if group is not None:
            ev["group"] = group
        ev |= {"mono_ns": t, "wall": round(self.wall0 + t / NS_PER_S, 6), **fields}
        self.events.append((t, len(self.events), ev))

    def by_node(self) -> dict[str, list[dict[str, Any]]]:
        """Each node's events in emission order, on the clocks a real node has
        (docs/events.md): `mono_ns` counts from the node process's start (a
        restart starts it at zero again) and each `started` carries the
        process's `mono_origin_ns` on the harness's monotonic clock, whose
        reading at the history's zero is MONO_AT_ZERO."""
        out: dict[str, list[dict[str, Any]]] = {n: [] for n in NODES}
        since: dict[str, int] = {}
        for t, _, ev in sorted(self.events, key=lambda e: (e[0], e[1])):
            if ev["kind"] == "started":
                since[ev["node"]] = t
                ev["mono_origin_ns"] = MONO_AT_ZERO + t
            ev["mono_ns"] = t - since.get(ev["node"], 0)
            out[ev["node"]].append(ev)
        return out

    def elect(self, t: int, group: str, voters: tuple[str, ...], leader: str, term: int) -> None:
        """`leader` wins `term`; the other voters follow it."""
        for node in voters:
            self.emit(t, node, "term", group, term=term)
        self.emit(t, leader, "role", group, role="leader", term=term)
        for node in voters:
            if node != leader:
                self.emit(t + 1, node, "vote-granted", group, candidate=leader, term=term)
                self.emit(t + 1, node, "role", group, role="follower", term=term)
            self.emit(t + 2, node, "leader", group, leader=leader, term=term)

    def config(self, t: int, kinds: tuple[str, ...], nodes: tuple[str, ...], **conf: Any) -> None:
        """One part-0 configuration entry's events on each node."""
        for node in nodes:
            for n, kind in enumerate(kinds):
                self.emit(t + n, node, kind, "part-0", **conf)

    def build(self, *, faults: bool, changes: bool, rebalance: bool) -> None:
        """Emits the whole story (see the module doc)."""
        for node in NODES:
            self.emit(0, node, "started")
        for group, voters in (("part-0", OLD_PART0), ("part-1", PART1)):
            boot = {"index": 1, "stage": "stable", "peers": list(voters), "old_peers": None,
                    "learners": [], "token": None, "term": 1}  # fmt: skip
            for node in voters:
                self.emit(1, node, "config-applied", group, **boot)
                self.emit(2, node, "config-committed", group, **boot)
            self.elect(10, group, voters, voters[0] if group == "part-0" else "n4", 1)
        revision = self._initial_assignments() if rebalance else 0
        if faults:
            self._partition()
            self._kill()
        if changes:
            self._change_peers(revision if rebalance else None)
        self._final_digests(changes)

    def _initial_assignments(self) -> int:
        for rev, (part, peers) in enumerate(((0, OLD_PART0), (1, PART1)), start=1):
            self.emit(100, "n1", "assignments-written", zone=ZONE, partition=part, revision=rev,
                      keys={f"zone.{ZONE}.assignments.stable": {"old": None,
                                                               "new": list(peers)}})  # fmt: skip
        return 2

    def _partition(self) -> None:
        p0, p1 = window(self.end, PARTITION)
        self.emit(p0 + 5 * NS_PER_MS, "n5", "role", "part-1", role="candidate", term=2)
        self.elect(p0 + 6 * NS_PER_MS, "part-1", ("n3", "n5"), "n5", 2)
        self.emit(p1 + NS_PER_MS, "n4", "term", "part-1", term=2)
        self.emit(p1 + NS_PER_MS, "n4", "step-down", "part-1", reason="higher-term", term=2)
        self.emit(p1 + NS_PER_MS, "n4", "role", "part-1", role="follower", term=2)
        self.emit(p1 + 2 * NS_PER_MS, "n4", "leader", "part-1", leader="n5", term=2)

    def _kill(self) -> None:
        _, k1 = window(self.end, KILL)
        self.emit(k1 + NS_PER_MS, "n2", "started")
        self.emit(k1 + 2 * NS_PER_MS, "n2", "role", "part-0", role="follower", term=1)
        self.emit(k1 + 3 * NS_PER_MS, "n2", "leader", "part-0", leader="n1", term=1)

    def _change_peers(self, revision: int | None) -> None:
        """part-0: n1,n2,n3 -> n1,n3,n4 through catching-up, joint and stable."""
        c0, c1 = window(self.end, CHANGE)
        step = (c1 - c0) // 8
        old, new, token = list(OLD_PART0), list(NEW_PART0), f"chg-{self.seed}"
        if revision is not None:
            revision = self._rebalance_start(c0, revision)
        stage = {"peers": new, "old_peers": old, "learners": [], "token": token, "term": 1}
        self.emit(c0 + step, "n1", "change-stage", "part-0", stage="catching-up", **stage)
        self.emit(c0 + step, "n1", "catchup-start", "part-0", peer="n4", margin=1000,
                  leader_last=40, match=0, term=1)  # fmt: skip
        self.emit(c0 + step, "n4", "leader", "part-0", leader="n1", term=1)
        self.emit(c0 + 2 * step, "n1", "catchup-done", "part-0", peer="n4", leader_last=60,
                  match=58, term=1)  # fmt: skip
        joint = {"index": 61, "stage": "joint", **stage}
        self.config(c0 + 3 * step, ("config-appended", "config-applied"), ("n1", "n3", "n4"),
                    **joint)  # fmt: skip
        self.emit(c0 + 3 * step + 5, "n1", "change-stage", "part-0", stage="joint", **stage)
        self.config(c0 + 4 * step, ("config-committed",), ("n1", "n3", "n4"), **joint)
        final = {**joint, "index": 62, "stage": "stable", "old_peers": None}
        self.config(c0 + 5 * step, ("config-appended", "config-applied"), ("n1", "n3", "n4"),
                    **final)  # fmt: skip
        self.emit(c0 + 5 * step + 5, "n1", "change-stage", "part-0", stage="stable", **stage)
        self.config(c0 + 6 * step, ("config-committed",), ("n1", "n3", "n4"), **final)
        self.emit(c0 + 6 * step + 5, "n1", "change-done", "part-0", peers=new, learners=[],
                  token=token, term=1)  # fmt: skip
        self.emit(c0 + 6 * step + 6, "n1", "change-stage", "part-0", stage="none", **stage)
        self.emit(c0 + 6 * step + 7, "n4", "role", "part-0", role="follower", term=1)
        if revision is not None:
            keys = {"stable": {"old": old, "new": new}, "pending": {"old": new, "new": None}}
            self._assignments(c0 + 7 * step, revision + 1, keys)

    def _assignments(self, t: int, revision: int, keys: dict[str, Any]) -> None:
        full = {f"zone.{ZONE}.assignments.{k}": v for k, v in keys.items()}
        self.emit(t, "n1", "assignments-written", zone=ZONE, partition=0, revision=revision,
                  group="part-0", keys=full)  # fmt: skip

    def _rebalance_start(self, t: int, revision: int) -> int:
        """Writes pending (and the change trigger) and delivers the request."""
        rev = revision + 1
        pending = {"old": None, "new": list(NEW_PART0)}
        self._assignments(t, rev, {"pending": pending, "change": {"old": None, "new": rev}})
        for direction in ("received", "applied"):
            self.emit(t + 1, "n1", "rebalance-request", "part-0", direction=direction,
                      request_revision=rev, last_seen_revision=rev if direction == "applied"
                      else revision, partition=0, peers=list(NEW_PART0))  # fmt: skip
        return rev

    def _final_digests(self, changes: bool) -> None:
        """Every voter reports the same applied state at the end."""
        t = self.end - NS_PER_MS
        for group, voters in (("part-0", NEW_PART0 if changes else OLD_PART0), ("part-1", PART1)):
            index = 500
            digest = hashlib.sha256(f"{self.seed}/{group}/{index}".encode()).hexdigest()[:16]
            for node in voters:
                self.emit(t, node, "applied", group, index=index, digest=digest)
        for t_end, node in ((self.end, n) for n in NODES):
            self.emit(t_end, node, "stopping")
