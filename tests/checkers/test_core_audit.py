"""The raft checker on events from the real Raft core, planted bugs included.

A minimal in-test driver (the API's loop: ready, send, advance; no disk, no
delays) runs one group through an election and a change that adds a peer.
Clean, the checker passes; with the core's planted bugs switched on, it
flags each under its own kind.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from checkers.api import CheckContext, CheckerResult
from checkers.raft import RaftChecker

raft = pytest.importorskip("ember.raft")


class _Group:
    def __init__(self, voters: list[str], spares: list[str], bug: str | None) -> None:
        config = raft.RaftConfig(
            election_timeout_ticks=10,
            catchup_margin=5,
            planted_bugs=frozenset({bug} if bug else ()),
        )
        conf = raft.ConfState(peers=tuple(voters))
        self.nodes = {
            n: raft.RawNode(n, "g", config, random.Random(i), conf=conf if n in voters else None)
            for i, n in enumerate(voters + spares)
        }
        self.events: dict[str, list[dict[str, Any]]] = {n: [] for n in self.nodes}
        self.clock = 0

    def pump(self) -> None:
        for _ in range(1000):
            sent: list[Any] = []
            for node_id, node in self.nodes.items():
                while node.has_ready():
                    rd = node.ready()
                    sent.extend(rd.messages)
                    for ev in rd.events:
                        self.events[node_id].append({**ev, "node": node_id, "mono_ns": self.clock})
                    node.advance(rd)
            if not sent:
                return
            for msg in sent:
                self.nodes[msg.dst].step(msg)

    def run(self, ticks: int) -> None:
        for _ in range(ticks):
            self.clock += 1
            for node in self.nodes.values():
                node.tick()
            self.pump()

    def leader(self) -> Any:
        return next(n for n in self.nodes.values() if n.status().role == "leader")


def _events(bug: str | None, *, remove_leader: bool = False) -> dict[str, list[dict[str, Any]]]:
    group = _Group(["n1", "n2", "n3"], ["n4", "n5"], bug)
    group.run(40)
    leader = group.leader()
    for i in range(30):
        leader.propose(f"x{i}".encode())
    group.pump()
    keep = [n for n in ("n1", "n2", "n3") if n != leader.id] if remove_leader else ["n1", "n2"]
    leader.change_peers([*keep, "n4", "n5"], token=7)
    group.run(60)
    return group.events


def _changed(bug: str | None, *, remove_leader: bool = False) -> CheckerResult:
    return RaftChecker().check(CheckContext(audit=_events(bug, remove_leader=remove_leader)))


def test_clean_change_passes() -> None:
    """A change that adds two peers and removes one, done by the real core, is clean."""
    result = _changed(None)
    assert result.valid is True, result.anomalies
    assert result.figures["checks"]["joint-catchup"] >= 1


def test_removed_leader_steps_down_cleanly() -> None:
    """A change that removes the leader ends with it stepping down; without it, flagged."""
    events = _events(None, remove_leader=True)
    result = RaftChecker().check(CheckContext(audit=events))
    assert result.valid is True, result.anomalies
    # Erase the step-down (and the role change and leader loss it causes).
    removed = next(n for n, evs in events.items() if any(e.get("reason") == "removed" for e in evs))
    events[removed] = [
        e for e in events[removed]
        if e["kind"] not in ("step-down", "role", "leader") or e.get("term", 0) < 1
        or e.get("role") in ("leader", "candidate")
    ]  # fmt: skip
    kinds = {a.kind for a in RaftChecker().check(CheckContext(audit=events)).anomalies}
    assert "removed-leader-stayed" in kinds


@pytest.mark.parametrize(
    ("bug", "kind"), [("skip-joint", "joint-skipped"), ("skip-catchup", "joint-before-catchup")]
)
def test_planted_core_bugs_are_flagged(bug: str, kind: str) -> None:
    """The core's planted change-peers bugs show in its audit events."""
    result = _changed(bug)
    assert kind in {a.kind for a in result.anomalies}, result.anomalies
