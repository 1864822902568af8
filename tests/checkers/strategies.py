"""Hypothesis strategies for the checker tests: audit-event scripts of Raft
groups going through elections and change-peers, clean or with one planted
anomaly."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

NODES = ("n1", "n2", "n3", "n4", "n5")
RAFT_BUGS = (
    "two-leaders",
    "leader-not-voter",
    "joint-skipped",
    "two-uncommitted-configs",
    "joint-before-catchup",
    "removed-leader-stayed",
)

ADDING_BUGS = ("joint-skipped", "joint-before-catchup", "two-uncommitted-configs")


class RaftScript:
    """Writes the audit events a correct (or planted-buggy) group would emit."""

    def __init__(self, group: str = "part-1", peers: tuple[str, ...] = NODES[:3]) -> None:
        self.group = group
        self.events: dict[str, list[dict[str, Any]]] = {n: [] for n in NODES}
        self.clock = 0
        self.term = 0
        self.index = 1
        self.leader: str | None = None
        self.peers = tuple(sorted(peers))
        for n in self.peers:
            self._config(n, "config-appended", 1, self.peers, None)
            self._config(n, "config-applied", 1, self.peers, None)
            self._config(n, "config-committed", 1, self.peers, None)

    def emit(self, node: str, kind: str, **fields: Any) -> None:
        """Appends one event to `node`'s log."""
        self.clock += 1000
        ev = {"kind": kind, "node": node, "group": self.group, "mono_ns": self.clock}
        ev["term"] = self.term
        ev.update(fields)
        self.events[node].append(ev)

    def _config(self, node: str, kind: str, index: int, peers: Any, old: Any) -> None:
        self.emit(
            node, kind, index=index, stage="stable" if old is None else "joint",
            peers=sorted(peers), old_peers=None if old is None else sorted(old), learners=[],
            token=index,
        )  # fmt: skip

    def elect(self, node: str, *, duplicate: str | None = None) -> None:
        """`node` wins a new term; `duplicate` (a planted bug) wins it too."""
        if self.leader is not None:
            self.emit(self.leader, "step-down", reason="higher-term")
        self.term += 1
        for n in [node] + ([duplicate] if duplicate else []):
            self.emit(n, "role", role="leader", term=self.term)
        self.leader = node

    def _append(self, nodes: Any, peers: Any, old: Any, *, commit: bool = True) -> int:
        self.index += 1
        for n in nodes:
            self._config(n, "config-appended", self.index, peers, old)
            self._config(n, "config-applied", self.index, peers, old)
        if commit:
            for n in nodes:
                self._config(n, "config-committed", self.index, peers, old)
        return self.index

    def change(self, new: tuple[str, ...], bug: str | None = None) -> None:
        """The leader moves the group to `new` through catch-up, joint and stable."""
        leader, old, new = self.leader, self.peers, tuple(sorted(new))
        assert leader is not None
        both = sorted(set(old) | set(new), key=lambda n: (n != leader, n))
        self.emit(leader, "change-stage", stage="catching-up", peers=list(new), old_peers=list(old))
        for peer in sorted(set(new) - set(old)):
            self.emit(leader, "catchup-start", peer=peer, margin=10, leader_last=50, match=0)
            if bug != "joint-before-catchup":
                self.emit(leader, "catchup-done", peer=peer, leader_last=50, match=45)
        for peer in sorted(set(new) - set(old)):
            self.emit(peer, "snapshot-installed", index=self.index, snap_term=self.term)
        if bug != "joint-skipped":
            self._append(both, new, old, commit=bug != "two-uncommitted-configs")
        self._append(both, new, None)
        self.emit(leader, "change-done", peers=list(new), learners=[], token=self.index)
        self.peers = new
        if leader not in new and bug != "removed-leader-stayed":
            self.emit(leader, "step-down", reason="removed")
            self.leader = None


@st.composite
def raft_scripts(draw: st.DrawFn, bug: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Audit events of one group's elections and changes, with `bug` planted once."""
    script = RaftScript(peers=tuple(draw(st.permutations(NODES))[:3]))
    steps = draw(st.integers(min_value=1, max_value=6))
    bug_at = draw(st.integers(min_value=0, max_value=steps - 1))
    for step in range(steps):
        planted = bug if step == bug_at else None
        election_bug = planted in ("leader-not-voter", "two-leaders")
        if script.leader is None or election_bug or draw(st.booleans()):
            voters = sorted(script.peers)
            outsiders = sorted(set(NODES) - set(voters))
            if planted == "leader-not-voter":
                # A learner: it holds the configuration that leaves it out.
                learner = draw(st.sampled_from(outsiders))
                script.emit(learner, "snapshot-installed", index=script.index, snap_term=1)
                script._config(learner, "config-applied", script.index, script.peers, None)
                script.elect(learner)
                planted = None
            elif planted == "two-leaders":
                a, b = draw(st.permutations(voters))[:2]
                script.elect(a, duplicate=b)
                planted = None
            else:
                script.elect(draw(st.sampled_from(voters)))
        if planted is None and step == bug_at and bug is not None:
            continue  # planted by the election above
        # Some bugs need a node outside the group: keep such groups at 3.
        small = bug in ("leader-not-voter", *ADDING_BUGS)
        size = 3 if small else draw(st.sampled_from((3, 5)))
        new = tuple(draw(st.permutations(NODES))[:size])
        if planted in ADDING_BUGS:
            # These bugs only show on a change that adds a peer.
            added = draw(st.sampled_from(sorted(set(NODES) - set(script.peers))))
            new = (added, *[n for n in draw(st.permutations(NODES)) if n != added][:2])
        if planted == "removed-leader-stayed":
            new = tuple(n for n in NODES if n != script.leader)[:3]
        script.change(new, planted)
    return {n: evs for n, evs in script.events.items() if evs}
