"""One input per catalog rule that breaks exactly that rule (tests/checkers/test_rules_fail.py).

Each case is the evidence a run would leave (audit events, a history, or
both) with one rule broken, built either by the real Raft core with a planted
bug (`AuditNet`, tests/checkers/raft_net.py) or by hand where no planted
defect reaches the rule. `CASES[rule]()` returns a `Case`; its `clean`
twin, where it has one, is the same input with the rule kept, which must
judge valid: the break, not the scaffolding, is what the checker sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ember.raft import RaftConfig
from tests.checkers.helpers import HistoryBuilder
from tests.checkers.raft_net import Audit, AuditNet
from tests.checkers.strategies import RaftScript

ZERO = 1_767_225_600.0  # the history's zero as Unix time (timeline.json)
S = 1_000_000_000
OLD, NEW, OTHER = ["n1", "n2", "n3"], ["n1", "n2", "n4"], ["n1", "n4", "n5"]


@dataclass
class Case:
    """What a run left: audit events, history events, checker options."""

    audit: Audit | None = None
    history: list[dict[str, Any]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    checkers: tuple[str, ...] = ("raft", "revisions")


# --- Raft rules ------------------------------------------------------------


def _script() -> RaftScript:
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1")
    return script


def r1() -> Case:
    script = RaftScript(peers=("n1", "n2", "n3"))
    script.elect("n1", duplicate="n2")
    return Case(script.events)


def r2() -> Case:
    script = _script()
    script.emit("n1", "timeout-now-sent", peer="n4")  # n4 is no voter of n1's configuration
    return Case(script.events)


def r4() -> Case:
    script = _script()
    script.events["n2"].append(
        {"kind": "config-committed", "node": "n2", "group": "part-1", "index": 1,
         "stage": "stable", "peers": ["n1", "n2", "n4"], "old_peers": None, "token": 1}
    )  # fmt: skip
    return Case(script.events)


def r5() -> Case:
    script = _script()
    # The leader alone stores and commits a joint entry that removes n3.
    for kind in ("config-appended", "config-applied", "config-committed"):
        script._config("n1", kind, 2, ("n1", "n2"), ("n1", "n2", "n3"))
    return Case(script.events)


def r7() -> Case:
    """The leader appends stable(new) while its joint entry is not committed yet;
    both commit later, in order (so the committed chain is legal)."""
    script = _script()
    new, old = ("n1", "n2", "n4"), ("n1", "n2", "n3")
    script.emit("n1", "change-stage", stage="catching-up", peers=list(new), old_peers=list(old))
    script.emit("n1", "catchup-start", peer="n4", margin=10, leader_last=50, match=0)
    script.emit("n1", "catchup-done", peer="n4", leader_last=50, match=45)
    joint = script._append((*new, "n3"), new, old, commit=False)
    stable = script._append((*new, "n3"), new, None, commit=False)
    for n in (*new, "n3"):
        script._config(n, "config-committed", joint, new, old)
        script._config(n, "config-committed", stable, new, None)
    return Case(script.events)


def _change(bug: str | None) -> Case:
    script = _script()
    script.change(("n1", "n2", "n4"), bug)
    return Case(script.events)


def r9() -> Case:
    script = _script()
    script.change(("n1", "n2", "n4"))
    for n in ("n1", "n2", "n4"):  # the configuration in force again, from an older request
        for kind in ("config-appended", "config-applied", "config-committed"):
            script.emit(n, kind, index=script.index + 1, stage="stable",
                        peers=["n1", "n2", "n4"], old_peers=None, learners=[], token=0)  # fmt: skip
    return Case(script.events)


def r10(planted: bool = True) -> Case:
    """n3, cut off from leader n1, campaigns; n2 still hears n1 every tick."""
    bugs = frozenset({"ignore-vote-lease"}) if planted else frozenset()
    net = AuditNet(["n1", "n2", "n3"], config=RaftConfig(planted_bugs=bugs), seed=2)
    net.elect("n1")
    net.tick(times=2)
    net.partition(["n3"], ["n1"])
    net.tick(times=25)
    return Case(net.audit())


def r11(step_down_s: float | None = None, crash_s: float | None = None) -> Case:
    """Leader n1 of part-1 isolated by a partition from 1 s to 5 s (T = 0.5 s);
    `crash_s`: n1's process exits at a crash failpoint then (no history op says so)."""
    audit: Audit = {}
    for n in OLD:
        audit[n] = [
            {"kind": "started", "tick_ms": 50.0, "election_timeout_ticks": 10, "wall": ZERO},
            {"kind": "config-applied", "group": "part-1", "index": 0, "stage": "stable",
             "peers": OLD, "old_peers": None, "learners": [], "token": 0, "commit": 0,
             "term": 0, "wall": ZERO},
        ]  # fmt: skip
    audit["n1"].append({"kind": "role", "group": "part-1", "role": "leader", "term": 1,
                        "wall": ZERO + 0.5})  # fmt: skip
    if step_down_s is not None:
        audit["n1"].append({"kind": "step-down", "group": "part-1", "reason": "lost-quorum",
                            "term": 1, "wall": ZERO + step_down_s})  # fmt: skip
    if crash_s is not None:
        audit["n1"].append({"kind": "crash", "point": "after-persist", "wall": ZERO + crash_s})
    for n, evs in audit.items():
        for ev in evs:
            ev["node"] = n
    h = HistoryBuilder()
    grudge = {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    h.add("nemesis", "invoke", "partition", dt=S, value={"kind": "partition"})
    h.add("nemesis", "ok", "partition", dt=0, value={"kind": "partition", "grudge": grudge})
    h.op("nemesis", "heal-partition", dt=4 * S)
    return Case(audit, h.events, {"history_zero_wall": ZERO}, ("raft",))


def r12(planted: bool = True) -> Case:
    """Leader n1 moves the group to n2, n3, n4, leaving it."""
    bugs = frozenset({"step-down-on-joint"}) if planted else frozenset()
    net = AuditNet(["n1", "n2", "n3"], config=RaftConfig(planted_bugs=bugs), seed=4)
    net.add("n4")
    net.elect("n1")
    net.tick(times=2)
    net.nodes["n1"].change_peers(["n2", "n3", "n4"], token=2)
    net.tick(times=40)
    return Case(net.audit())


# --- Rebalance rules -------------------------------------------------------------


def _write(rev: int, wall: float, **keys: Any) -> dict[str, Any]:
    named = {f"zone.1.assignments.{k}": v for k, v in keys.items()}
    return {"kind": "assignments-written", "zone": 1, "partition": 0, "revision": rev,
            "wall": wall, "keys": named}  # fmt: skip


def _commit(peers: list[str], index: int, wall: float) -> dict[str, Any]:
    return {"kind": "config-committed", "group": "part-0", "stage": "stable", "index": index,
            "peers": peers, "old_peers": None, "wall": wall, "token": index}  # fmt: skip


def _moved(*then: dict[str, Any]) -> Case:
    """OLD -> NEW done right, then `then`."""
    return Case({"n1": [
        _write(1, 1.0, stable={"old": None, "new": OLD}),
        _write(2, 2.0, pending={"old": None, "new": NEW}, change={"old": None, "new": 10}),
        _commit(NEW, 5, 3.0),
        _write(3, 4.0, stable={"old": OLD, "new": NEW}, pending={"old": NEW, "new": None}),
        *then,
    ]}, checkers=("revisions",))  # fmt: skip


def m1() -> Case:
    # OTHER committed (by hand), then stable switched to it with nothing pending.
    return _moved(_commit(OTHER, 9, 5.0), _write(4, 6.0, stable={"old": NEW, "new": OTHER}))


def m2() -> Case:
    # Back to OLD through a pending, but stable names OLD's commit at 1, before NEW's at 5.
    return _moved(
        _write(4, 5.0, pending={"old": None, "new": OLD}, change={"old": 10, "new": 11}),
        _commit(OLD, 1, 0.5),
        _write(5, 6.0, stable={"old": NEW, "new": OLD}, pending={"old": OLD, "new": None}),
    )


def m3() -> Case:
    return _moved(_write(4, 5.0, change={"old": 9, "new": 11}))  # change held 10


def m4() -> Case:
    return _moved(_write(4, 5.0, change={"old": 10, "new": 10}))


def m5() -> Case:
    cancel = {"old": NEW, "new": OTHER, "pending_revision": 4}
    return _moved(
        _write(4, 5.0, pending={"old": None, "new": OTHER}, change={"old": 10, "new": 11}),
        _write(5, 6.0, cancel={"old": None, "new": cancel}),
        _write(6, 7.0, cancel={"old": cancel, "new": None}),  # pending left behind
    )


def m6() -> Case:
    request = {"kind": "rebalance-request", "partition": 0, "direction": "applied",
               "request_revision": 2, "last_seen_revision": 3, "peers": NEW}  # fmt: skip
    return _moved(request)


def m7() -> Case:
    return _moved({**_commit(["n1", "n2", "n9"], 7, 5.0), "stage": "joint",
                   "old_peers": NEW})  # fmt: skip


def _act(lease: int, wall: float, act: str = "request-rebalance") -> dict[str, Any]:
    return {"kind": "driver-acting", "act": act, "driver_lease": lease, "wall": wall}


def m9(planted: bool = True) -> Case:
    # n1 drives under lease 5; n2 takes over (lease 9) at 10.0 and acts; n1,
    # trusting its own clock, acts once more at 10.4 (planted) or stops (clean).
    n1 = [_act(5, 8.0, "write-lease"), _act(5, 9.0)]
    n2 = [{"kind": "placement-driver", "active": True, "driver_lease": 9, "wall": 10.0},
          _act(9, 10.1, "trigger"), _act(12, 11.0)]  # fmt: skip
    if planted:
        n1.append(_act(5, 10.4))
    return Case({"n1": n1, "n2": n2}, checkers=("revisions",))


# --- Reads, convergence, stability, availability ----------------------------------


def m8() -> Case:
    h = HistoryBuilder()
    h.op(0, "put", key="k1", value=1).op(1, "get", key="k1", result=None)
    return Case(history=h.events, checkers=("linearizable",))


def _quiet(extra: dict[str, list[dict[str, Any]]] | None = None, final: str = "ok") -> Case:
    """part-0 at NEW, settled; a fault healed at 1 s; a final read at 12 s (Q = 10 s)."""
    audit: Audit = {}
    for n in NEW:
        audit[n] = [
            {"kind": "config-applied", "group": "part-0", "peers": NEW, "old_peers": None},
            {"kind": "role", "group": "part-0", "role": "leader" if n == "n1" else "follower",
             "term": 3},
            {"kind": "applied", "group": "part-0", "index": 40, "digest": "abc"},
        ]  # fmt: skip
    audit["n1"].append(_write(1, 0.5, stable={"old": None, "new": NEW}))
    for n, evs in (extra or {}).items():
        audit[n] += evs
    for n, evs in audit.items():
        for ev in evs:
            ev.update(node=n, wall=ZERO + float(ev.get("wall") or 0.5))
    h = HistoryBuilder()
    h.op("nemesis", "partition", type_="info", dt=S // 2).op("nemesis", "heal", dt=S // 2)
    h.add(0, "invoke", "read", dt=11 * S, key="k1").add(0, final, "read", dt=S // 100, key="k1")
    return Case(audit, h.events, {"history_zero_wall": ZERO, "quiet_s": 10.0}, ("convergence",))


def l1() -> Case:
    # n2 ends two digest reports behind the others.
    ahead = [{"kind": "applied", "group": "part-0", "index": i, "digest": f"d{i}"}
             for i in (45, 50)]  # fmt: skip
    return _quiet({"n1": [dict(e) for e in ahead], "n4": [dict(e) for e in ahead]})


def l2() -> Case:
    return _quiet({"n2": [{"kind": "term", "group": "part-0", "term": 4, "wall": 9.0}]})


def late_follower(term: int = 3, leader: str = "n1") -> Case:
    """n2 learns a leader only 9 s in: no change if it is term 3's n1 (elected before)."""
    return _quiet({"n2": [{"kind": "leader", "group": "part-0", "leader": leader, "term": term,
                           "wall": 9.0}]})  # fmt: skip


def l3() -> Case:
    return _quiet(final="info")


CASES: dict[str, Callable[[], Case]] = {
    "R1": r1, "R2": r2, "R4": r4, "R5": r5,
    "R6": lambda: _change("joint-skipped"),
    "R7": r7,
    "R8": lambda: _change("joint-before-catchup"),
    "R9": r9, "R10": r10, "R11": r11, "R12": r12,
    "M1": m1, "M2": m2, "M3": m3, "M4": m4, "M5": m5, "M6": m6, "M7": m7, "M8": m8,
    "M9": m9, "L1": l1, "L2": l2, "L3": l3,
}  # fmt: skip

# The same inputs with the rule kept: they must judge valid.
CLEAN: dict[str, Callable[[], Case]] = {
    "R6": lambda: _change(None),
    "R10": lambda: r10(planted=False),
    "R11": lambda: r11(step_down_s=1.9),
    # A leader dead at a --failpoint crash leads nothing (sim seed 71 called its
    # leadership kept 20 s after the crash, into a partition).
    "R11-crashed": lambda: r11(crash_s=0.8),
    "R12": lambda: r12(planted=False),
    "M-rules": lambda: _moved(),
    "M9": lambda: m9(planted=False),
    "L-rules": _quiet,
    "L2-late-follower": late_follower,
}


def stale_then_late_follower() -> Case:
    """n2, cut off, first gets a frame of term 2's leader n4 (held back by TCP's
    backoff), then term 3's n1: both on its way to the leader elected before."""
    return _quiet({"n2": [
        {"kind": "leader", "group": "part-0", "leader": "n4", "term": 2, "wall": 9.0},
        {"kind": "term", "group": "part-0", "term": 3, "wall": 9.001},
        {"kind": "leader", "group": "part-0", "leader": "n1", "term": 3, "wall": 9.001},
    ]})  # fmt: skip
