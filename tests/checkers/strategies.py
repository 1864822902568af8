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
            break  # the script cannot go on with a leader outside the group
        if set(new) != set(script.peers):  # the core completes a no-op change at once
            script.change(new, planted)
    return {n: evs for n, evs in script.events.items() if evs}


# --- metastore histories ---------------------------------------------------

REVISION_BUGS = (
    "stale-revision",
    "write-revision-not-increasing",
    "duplicate-write-revision",
    "watch-gap",
    "watch-resume-gap",
    "watch-duplicate",
    "watch-revision-went-back",
    "watch-before-start",
)


class MetastoreScript:
    """A linearizable metastore history: each op takes effect as it completes."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.revision = 0
        self.writes: list[tuple[str, int]] = []  # (key, revision) in order
        self.open: dict[int, dict[str, Any]] = {}
        self.next_process = 0

    def add(self, process: int, type_: str, f: str, **fields: Any) -> None:
        """Appends one event."""
        n = len(self.events)
        self.events.append({"index": n, "time": n * 10, "process": process, "type": type_,
                            "f": f, **fields})  # fmt: skip

    def invoke(self, f: str, key: str) -> int:
        """Opens an op on a fresh process; returns the process."""
        process = self.next_process
        self.next_process += 1
        value = {"put": key.upper(), "get": None}[f]
        self.add(process, "invoke", f, key=key, value=value)
        self.open[process] = {"f": f, "key": key, "value": value}
        return process

    def complete(self, process: int, revision: int | None = None) -> None:
        """Completes an open op; it takes effect now (or reports `revision`)."""
        op = self.open.pop(process)
        if op["f"] == "put":
            self.revision += 1
            rev = self.revision if revision is None else revision
            self.writes.append((op["key"], rev))
            self.add(process, "ok", "put", key=op["key"], value=rev)
        else:
            rev = self.revision if revision is None else revision
            self.add(process, "ok", "get", key=op["key"], value={"revision": rev})

    def watch(self, start: int, deliver: list[tuple[str, int]]) -> None:
        """A watch over every key from `start`, delivering `deliver` in order."""
        process = self.invoke("get", "_")  # reserve a process id
        self.open.pop(process)
        self.events.pop()
        self.add(process, "invoke", "watch", value={"prefix": "", "from": start})
        items = [{"key": k, "revision": r} for k, r in deliver]
        self.add(process, "ok", "watch", value=items)

    def clean_watch(self, start: int) -> list[tuple[str, int]]:
        """What a correct watch from `start` delivers."""
        return [(k, r) for k, r in self.writes if r >= start]


@st.composite
def metastore_histories(draw: st.DrawFn, bug: str | None = None) -> list[dict[str, Any]]:
    """A history of concurrent puts/gets and a final watch, with `bug` planted."""
    script = MetastoreScript()
    keys = ("a", "b", "c")
    for _ in range(draw(st.integers(min_value=2, max_value=25))):
        if script.open and draw(st.booleans()):
            script.complete(draw(st.sampled_from(sorted(script.open))))
        else:
            script.invoke(draw(st.sampled_from(("put", "get"))), draw(st.sampled_from(keys)))
    while script.open:
        script.complete(min(script.open))
    while script.revision < 3:  # a gap must sit between two deliveries
        script.complete(script.invoke("put", keys[script.revision % 2]))
    top = script.revision
    if bug == "stale-revision":
        script.complete(script.invoke("get", "a"), revision=draw(st.integers(0, top - 1)))
    elif bug == "write-revision-not-increasing":
        script.complete(script.invoke("put", "a"), revision=draw(st.integers(1, top)))
    elif bug == "duplicate-write-revision":
        first, second = script.invoke("put", "a"), script.invoke("put", "b")
        script.complete(first)
        script.complete(second, revision=script.revision)
    # Three or more deliveries, so a gap can sit between the first and the last.
    start = draw(st.integers(min_value=1, max_value=top - 2))
    deliver = script.clean_watch(start)
    if bug == "watch-gap":
        del deliver[draw(st.integers(1, len(deliver) - 2))]  # not the last: that's a cut
    elif bug == "watch-resume-gap":
        del deliver[0]  # the resumed stream skips where it should continue
    elif bug == "watch-duplicate":
        at = draw(st.integers(0, len(deliver) - 1))
        deliver.insert(at, deliver[at])
    elif bug == "watch-revision-went-back":
        at = draw(st.integers(0, len(deliver) - 2))
        deliver[at], deliver[at + 1] = deliver[at + 1], deliver[at]
    elif bug == "watch-before-start":
        deliver.insert(0, script.writes[0] if start > 1 else ("z", 0))
    script.watch(start, deliver)
    return script.events


# --- rebalance (assignment keys) ----------------------------------------------

REBALANCE_BUGS = (
    "planned-without-pending",
    "change-trigger-not-increasing",
    "stable-before-commit",
    "cancel-wrong-pending",
)


class RebalanceScript:
    """Assignment-key writes of one partition following the rebalance design."""

    def __init__(self, stable: tuple[str, ...]) -> None:
        self.keys: dict[str, Any] = {"stable": sorted(stable)}
        self.written_at: dict[str, int] = {"stable": 1}
        self.revision, self.wall = 1, 1.0
        self.trigger = 0
        first = {"stable": {"old": None, "new": sorted(stable)}}
        self.events: list[dict[str, Any]] = [self._event(first)]

    def _event(self, keys: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "assignments-written", "node": "n1", "zone": 1, "partition": 0,
                "revision": self.revision, "wall": self.wall, "keys": keys}  # fmt: skip

    def write(self, **new: Any) -> None:
        """One atomic invoke: each key to its new value (None removes it)."""
        self.revision += 1
        self.wall += 1.0
        keys = {k: {"old": self.keys.get(k), "new": v} for k, v in new.items()}
        self.events.append(self._event(keys))
        for k, v in new.items():
            self.keys[k] = v
            self.written_at[k] = self.revision

    def commit(self, peers: Any) -> None:
        """The partition's group commits stable(peers)."""
        self.wall += 1.0
        self.events.append({"kind": "config-committed", "node": "n2", "group": "part-0",
                            "stage": "stable", "index": self.revision, "peers": peers,
                            "old_peers": None, "wall": self.wall})  # fmt: skip

    def retarget(self, target: list[str], bug: str | None) -> None:
        """A trigger: the design's pending/planned update."""
        self.trigger += 1 if bug != "change-trigger-not-increasing" else -2
        pending = self.keys.get("pending")
        if bug == "planned-without-pending" and not pending:
            self.write(planned=target, change=self.trigger)
        elif not pending and self.keys["stable"] != target:
            self.write(pending=target, change=self.trigger)
        elif pending and pending != target:
            self.write(planned=target, change=self.trigger)
        elif bug == "change-trigger-not-increasing":
            self.write(change=self.trigger)

    def finish(self, bug: str | None) -> None:
        """The group reached pending: promote it (after the commit)."""
        pending = self.keys.get("pending")
        if not pending:
            return
        if bug != "stable-before-commit":
            self.commit(pending)
        planned = self.keys.get("planned")
        self.write(stable=pending, pending=planned, planned=None, cancel=None)
        if bug == "stable-before-commit":
            self.commit(pending)  # too late

    def cancel(self, bug: str | None) -> None:
        """Cancel the pending rebalance, naming its revision."""
        pending = self.keys.get("pending")
        if not pending:
            return
        named = self.written_at["pending"] - (1 if bug == "cancel-wrong-pending" else 0)
        value = {"old": self.keys["stable"], "new": pending, "pending_revision": named}
        self.write(cancel=value)
        self.write(cancel=None, pending=self.keys.get("planned"), planned=None)


@st.composite
def rebalance_scripts(draw: st.DrawFn, bug: str | None = None) -> list[dict[str, Any]]:
    """One partition's rebalances (triggers, promotions, cancels), `bug` planted once."""
    script = RebalanceScript(tuple(draw(st.permutations(NODES))[:3]))
    steps = draw(st.integers(min_value=1, max_value=12))
    bug_at = draw(st.integers(min_value=0, max_value=steps - 1))
    for step in range(steps):
        planted = bug if step == bug_at else None
        action = draw(st.sampled_from(("retarget", "finish", "cancel")))
        if planted in ("planned-without-pending", "change-trigger-not-increasing"):
            action = "retarget"
            if planted == "change-trigger-not-increasing" and script.keys.get("change") is None:
                script.trigger += 1
                script.write(change=script.trigger)  # a trigger to go back from
            if planted == "planned-without-pending":
                script.finish(None)  # empty pending first
                script.cancel(None)
        elif planted is not None:
            action = "finish" if planted == "stable-before-commit" else "cancel"
            if not script.keys.get("pending"):
                script.retarget(sorted(set(NODES) - set(script.keys["stable"]))[:3], None)
        if action == "retarget":
            script.retarget(sorted(draw(st.permutations(NODES))[:3]), planted)
        elif action == "finish":
            script.finish(planted)
        else:
            script.cancel(planted)
    return script.events
