"""Phases of etcd membership changes, for the phase-triggered nemesis.

Theory of operation. etcd writes no audit events, so a thread polls the
member list (POST /v3/cluster/member/list, a linearizable read through any
member) every `poll_s` and compares it with the previous answer. Each
difference is one observation, shaped like `nemesis.phase.phase_of`'s:

- a new member that is a learner: stage `catching-up` (etcd's learner is
  the counterpart of ember's catching-up peer), `joining` = that node;
- a learner that became a voter (promoted): stage `stable`;
- a member that is gone (removed): stage `stable`.

`etcd_stage` names the exact transition (learner-added, promoted, added,
removed). etcd 3.4 changes membership in one step, so there is no `joint`
phase. `node` is the leader as its status reports it, so a leader fault
lands on the node that just committed the change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from harness.dbs.etcd import GROUP, EtcdDB
from harness.nodehttp import http_json

POLL_S = 0.1


def transitions(before: dict[str, bool], after: dict[str, bool]) -> list[tuple[str, str, str]]:
    """(node, etcd_stage, stage) per change between two {node: is_learner} maps."""
    out = []
    for node in sorted(set(after) - set(before)):
        out.append(
            (node, "learner-added", "catching-up") if after[node] else (node, "added", "stable")
        )
    for node in sorted(set(before) & set(after)):
        if before[node] and not after[node]:
            out.append((node, "promoted", "stable"))
    for node in sorted(set(before) - set(after)):
        out.append((node, "removed", "stable"))
    return out


def observations(
    before: dict[str, bool], after: dict[str, bool], leader: str | None
) -> list[dict[str, Any]]:
    """The phase observations of the transitions between two member maps."""
    voters = sorted(n for n, learner in after.items() if not learner)
    old = sorted(n for n, learner in before.items() if not learner)
    # The node a change brings in: a learner added, then promoted (or a voter
    # added at once), so a fault at its `stable` aimed at the joining peer hits
    # it, not a random node; a removal brings in none.
    return [{"group": GROUP, "stage": stage, "etcd_stage": etcd_stage, "node": leader,
             "peers": voters, "old_peers": old,
             "joining": [] if etcd_stage == "removed" else [node]}
            for node, etcd_stage, stage in transitions(before, after)]  # fmt: skip


class MemberWatcher:
    """Polls etcd's member list; calls `on_phase(observation)` per transition."""

    def __init__(self, db: EtcdDB, on_phase: Callable[[dict[str, Any]], None],
                 poll_s: float = POLL_S) -> None:  # fmt: skip
        self.db, self.on_phase, self.poll_s = db, on_phase, poll_s
        self.stages: dict[str, str] = {}
        self.seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="etcd-members")

    def start(self) -> None:
        """Start polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop polling and join the thread."""
        self._stop.set()
        self._thread.join(timeout=5)

    def members(self) -> dict[str, bool] | None:
        """{node: is_learner} as the first member that answers says."""
        for url in self.db.member_urls():
            doc = http_json(url + "/v3/cluster/member/list", "POST", {}, timeout_s=1)
            if doc is None or "members" not in doc:
                continue
            out = {}
            for m in doc["members"]:
                node = self.db.node_of_peer((m.get("peerURLs") or [""])[0])
                if node is not None:
                    out[node] = bool(m.get("isLearner", False))
            return out
        return None

    def _loop(self) -> None:
        before = self.members()
        while not self._stop.wait(self.poll_s):
            after = self.members()
            if after is None or before is None:
                before = after if after is not None else before
                continue
            if transitions(before, after):
                for obs in observations(before, after, self.db.leaders().get(GROUP)):
                    self.seen += 1
                    self.stages[GROUP] = obs["etcd_stage"]
                    self.on_phase(obs)
            before = after
