"""The nemesis worker resolves abstract faults against the cluster (fake control, no SSH)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from harness.backends.base import NodeHandle, SshTarget
from harness.control import CommandResult
from harness.process_db import DBError
from nemesis import schedule
from nemesis.fault import Fault
from nemesis.schedule import NemesisWorker
from workloads.generator import Op

NAMES = ["n1", "n2", "n3", "n4", "n5"]
NODES = [NodeHandle(name=n, ip=f"10.0.0.{i}", ssh=SshTarget(host="h")) for i, n in
         enumerate(NAMES, 1)]  # fmt: skip


class FakeControl:
    """Records scripts; every command succeeds; netem is present unless told otherwise."""

    def __init__(self, netem: bool = True) -> None:
        self.scripts: list[dict[str, str]] = []
        self.netem = netem
        self.nodes = {n.name: n for n in NODES}

    def run_many(self, todo: Mapping[str, str], **_kw: Any) -> dict[str, CommandResult]:
        self.scripts.append(dict(todo))
        return {n: CommandResult(n, c, 0, "", "") for n, c in todo.items()}

    def run(self, node: str, command: str, **_kw: Any) -> CommandResult:
        ok = self.netem or "netem" not in command
        return CommandResult(node, command, 0 if ok else 2, "10.0.0.9 dev eth0 src x", "")


class FakeDB:
    """Leaders by table; process faults recorded, failpoints remembered."""

    def __init__(self) -> None:
        self.killed: list[str] = []
        self.failpoints: dict[tuple[str, str], Any] = {}

    def groups(self) -> list[str]:
        return ["part-0", "part-1"]

    def leaders(self, names: Sequence[str] | None = None) -> dict[str, str]:
        return {"part-0": "n2", "part-1": "n3"}

    def kill(self, control: Any, names: Sequence[str]) -> Fault:
        self.killed += names
        return Fault(kind="kill", detail={"nodes": list(names)}, commands={names[0]: ["kill -9 1"]})

    def start(self, control: Any, names: Sequence[str]) -> Fault:
        return Fault(kind="start")

    def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
        self.failpoints[(name, failpoint)] = params


def _invoke(worker: NemesisWorker, f: str, value: dict[str, Any]) -> Any:
    return asyncio.run(worker.invoke(Op(f=f, value=value)))


def test_a_triggered_leader_kill_hits_the_node_that_reported_the_phase() -> None:
    """The change-stage's emitter is the leader: it is killed without a status poll."""
    db = FakeDB()
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    trigger = {"group": "part-1", "stage": "joint", "node": "n5", "joining": ["n4"]}
    reply = _invoke(worker, "kill", {"kind": "kill", "target": "leader", "seed": 1,
                                     "group": "part-1", "trigger": trigger})  # fmt: skip
    assert reply.type == "ok"
    assert db.killed == ["n5"]
    assert reply.value["resolved"].startswith("leader of part-1 ")


def test_isolating_the_joining_peer_cuts_it_from_everyone() -> None:
    """isolate-joining drops traffic between the joining peer and every other node."""
    control = FakeControl()
    worker = NemesisWorker(control, NODES, FakeDB())  # type: ignore[arg-type]
    trigger = {"group": "part-0", "stage": "catching-up", "node": "n1", "joining": ["n4"]}
    reply = _invoke(worker, "partition", {"kind": "partition", "grouping": "isolate-joining",
                                          "seed": 3, "trigger": trigger})  # fmt: skip
    assert reply.value["grudge"]["n4"] == ["n1", "n2", "n3", "n5"]
    assert "partition" in worker.active
    healed = _invoke(worker, "heal-partition", {"kind": "partition"})
    assert healed.type == "ok"
    assert "FAULTLINE" in next(iter(control.scripts[-1].values()))
    assert not worker.active


def test_slow_catch_up_falls_back_to_failpoints_without_netem() -> None:
    """No netem: raft.append.delay toward the joining peer on every other node, and it says so."""
    db = FakeDB()
    worker = NemesisWorker(FakeControl(netem=False), NODES, db)  # type: ignore[arg-type]
    trigger = {"group": "part-0", "stage": "catching-up", "node": "n1", "joining": ["n4"]}
    reply = _invoke(worker, "slow", {"kind": "slow", "target": "joining", "seed": 2,
                                     "trigger": trigger})  # fmt: skip
    assert reply.value["method"] == "failpoint"
    assert {n for n, _ in db.failpoints} == {"n1", "n2", "n3", "n5"}
    assert all(p["peer"] == "n4" for p in db.failpoints.values())
    _invoke(worker, "heal-slow", {"kind": "slow"})
    assert all(p is None for p in db.failpoints.values())


def test_a_fault_that_cannot_be_applied_completes_info() -> None:
    """An error applying a fault is an unknown outcome naming it, not a crash."""
    worker = NemesisWorker(FakeControl(), NODES, FakeDB())  # type: ignore[arg-type]
    reply = _invoke(worker, "flood", {"kind": "flood", "seed": 1})
    assert reply.type == "info"
    assert "flood" in (reply.error or "")


class SilentDB(FakeDB):
    """A node that does not answer failpoint calls in time but acts on them:
    what the Docker full mix saw from a busy n1 (a 'refused' enable that took)."""

    def __init__(self, silent: set[str], *, acts: bool = True) -> None:
        super().__init__()
        self.silent, self.acts = silent, acts

    def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
        if self.acts or name not in self.silent:
            super().set_failpoint(name, failpoint, params)
        if name in self.silent:
            raise DBError(f"{name} did not confirm failpoint {failpoint}")

    def on(self) -> set[str]:
        return {n for (n, _), p in self.failpoints.items() if p is not None}


def _slow_worker(db: FakeDB) -> NemesisWorker:
    return NemesisWorker(FakeControl(netem=False), NODES, db)  # type: ignore[arg-type]


def _slow(worker: NemesisWorker) -> Any:
    trigger = {"group": "part-0", "stage": "catching-up", "node": "n1", "joining": ["n4"]}
    return _invoke(worker, "slow", {"kind": "slow", "target": "joining", "seed": 2,
                                    "trigger": trigger})  # fmt: skip


def test_a_slow_fault_a_node_did_not_confirm_is_rolled_back_on_that_node_too() -> None:
    db = SilentDB({"n2"})
    reply = _slow(_slow_worker(db))
    assert (reply.type, reply.value["applied"]) == ("info", False)
    assert db.on() == set(), db.failpoints  # n1 asked and answered, n2 asked and silent
    assert "may stay on at n2 until heal-all" in (reply.error or "")


def test_a_slow_heal_tries_every_node_and_heal_all_sweeps_what_was_left() -> None:
    db = SilentDB(set(), acts=False)
    worker = _slow_worker(db)
    assert _slow(worker).type == "ok"
    db.silent = {"n1"}  # and this time it does not act either
    healed = _invoke(worker, "heal-slow", {"kind": "slow"})
    assert healed.type == "info"
    assert "not confirmed off on n1" in (healed.error or "")
    assert db.on() == {"n1"}  # n2, n3 and n5 were still switched off
    db.silent = set()
    assert _invoke(worker, "heal-all", {}).type == "ok"
    assert db.on() == set()


def test_heal_all_says_so_when_a_slow_failpoint_cannot_be_confirmed_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Even a slow fault never applied leaves heal-all sweeping: its node may have
    switched the failpoint on without answering."""
    monkeypatch.setattr(schedule, "FAILPOINT_SWEEP_S", 0.05)  # asked again this long
    db = SilentDB({"n1"}, acts=False)
    worker = _slow_worker(db)
    assert _slow(worker).type == "info"
    reply = _invoke(worker, "heal-all", {})
    assert reply.type == "info"
    assert "not confirmed off on n1 after heal-all" in (reply.error or "")


def _drop(worker: NemesisWorker) -> Any:
    trigger = {"group": "part-1", "stage": "joint", "node": "n3", "joining": ["n4"]}
    return _invoke(worker, "drop-replies", {"kind": "drop-replies", "target": "leader",
                                            "seed": 4, "probability": 0.6, "group": "part-1",
                                            "trigger": trigger})  # fmt: skip


def test_drop_replies_switches_the_failpoint_on_at_its_target_and_off_at_the_heal() -> None:
    db = FakeDB()
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    reply = _drop(worker)
    assert reply.type == "ok", reply
    assert reply.value["node"] == "n3"
    assert db.failpoints == {("n3", "http.drop-reply"): {"probability": 0.6}}
    assert reply.value["commands"] == {
        "n3": ["POST /admin/failpoints/http.drop-reply {'probability': 0.6}"]
    }
    healed = _invoke(worker, "heal-drop-replies", {"kind": "drop-replies"})
    assert healed.type == "ok"
    assert db.failpoints == {("n3", "http.drop-reply"): None}


def test_drop_replies_not_confirmed_is_not_applied_and_switched_off_again() -> None:
    """A node that took the failpoint without confirming: the fault completes
    info, the worker switches it off there, and heal-all sweeps every node."""
    db = SilentDB({"n3"})
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    reply = _drop(worker)
    assert reply.type == "info"
    assert reply.value["applied"] is False
    assert "did not confirm" in reply.value["reason"]
    assert db.on() == set()  # rolled back there (also unconfirmed: heal-all sweeps again)
    db.silent.clear()
    worker.heal_everything()
    assert db.on() == set()
    assert {n for n, fp in db.failpoints if fp == "http.drop-reply"} == set(NAMES)


def test_drop_replies_on_a_db_without_failpoints_is_not_applied() -> None:
    class NoFailpoints(FakeDB):
        has_failpoints = False

        def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
            raise DBError(f"etcd has no failpoints ({failpoint} on {name})")  # as EtcdDB says

    reply = _drop(NemesisWorker(FakeControl(), NODES, NoFailpoints()))  # type: ignore[arg-type]
    assert reply.type == "info"
    assert "has no failpoints" in reply.value["reason"]


class SparesDB(FakeDB):
    """A db that runs on some nodes only (etcd's members; the rest are spares)."""

    name = "etcd"

    def running_in(self, names: Sequence[str]) -> list[str]:
        return [n for n in names if n in ("n1", "n3", "n4")]


def test_a_random_fault_lands_where_the_db_runs() -> None:
    """A random kill, and one aimed at a joining peer when the trigger names
    none (a change that only removes), hit a node the db runs on: aimed at
    a spare they applied nothing (Docker etcd seed 301, 2 of 8)."""
    removal = {"group": "etcd", "stage": "stable", "node": "n3", "joining": []}
    for seed in range(20):
        db = SparesDB()
        worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
        reply = _invoke(worker, "kill", {"kind": "kill", "target": "random", "seed": seed})
        assert reply.type == "ok"
        aimed = _invoke(worker, "kill", {"kind": "kill", "target": "joining", "seed": seed,
                                         "group": "etcd", "trigger": removal})  # fmt: skip
        assert aimed.value["resolved"] == "random node"
        assert set(db.killed) <= {"n1", "n3", "n4"}, (seed, db.killed)
    every = {_invoke(NemesisWorker(FakeControl(), NODES, FakeDB()), "kill",  # type: ignore[arg-type]
                     {"kind": "kill", "target": "random", "seed": s}).value["node"]
             for s in range(40)}  # fmt: skip
    assert every == set(NAMES)  # a db that does not say: every node


def test_heal_all_names_the_db_it_restarts() -> None:
    """The heal-all completion said 'start ember' in etcd runs too."""
    done = NemesisWorker(FakeControl(), NODES, SparesDB()).heal_everything()  # type: ignore[arg-type]
    assert done["commands"]["*"] == ["heal_all", "start etcd where not running"]


class WakingDB(SilentDB):
    """A node a heal just restarted: it refuses failpoint calls until it listens."""

    def __init__(self, node: str, refusals: int) -> None:
        super().__init__({node}, acts=False)
        self.refusals = refusals

    def set_failpoint(self, name: str, failpoint: str, params: Any) -> None:
        if name in self.silent:
            self.refusals -= 1
            if self.refusals < 0:
                self.silent.clear()
        super().set_failpoint(name, failpoint, params)


def test_heal_all_asks_a_restarting_node_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked 0.5 s after its restart, a node did not listen yet, and heal-all
    ended the run unknown (Docker seed 304): it is asked again until it
    answers, and only one that never does within the wait is reported."""
    monkeypatch.setattr(schedule, "FAILPOINT_SWEEP_POLL_S", 0.01)
    db = WakingDB("n5", refusals=3)
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    worker.failpoints_tried.add("raft.append.delay")
    worker.heal_everything()
    assert db.failpoints[("n5", "raft.append.delay")] is None
    monkeypatch.setattr(schedule, "FAILPOINT_SWEEP_S", 0.05)
    never = NemesisWorker(FakeControl(), NODES, SilentDB({"n5"}, acts=False))  # type: ignore[arg-type]
    never.failpoints_tried.add("raft.append.delay")
    with pytest.raises(DBError, match=r"raft\.append\.delay not confirmed off on n5"):
        never.heal_everything()


class RestartingDB(FakeDB):
    """Its nodes answer their status again only some polls after a restart."""

    def __init__(self, deaf_polls: int) -> None:
        super().__init__()
        self.deaf_polls, self.polls = deaf_polls, 0

    def status(self, name: str) -> dict[str, Any] | None:
        self.polls += 1
        return None if self.polls <= self.deaf_polls else {"groups": {}}


def test_a_failpoint_fault_waits_for_a_node_just_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """drop-replies 0.2 s after the heal of a kill restarted its node found it
    not listening and applied nothing (Docker seed 306): it now waits for the
    node to answer, on a node the worker restarted only."""
    monkeypatch.setattr(schedule, "RESTART_POLL_S", 0.001)
    db = RestartingDB(deaf_polls=3)
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    assert _invoke(worker, "kill", {"kind": "kill", "target": "random", "seed": 1}).type == "ok"
    killed = db.killed[0]
    assert _invoke(worker, "start", {"kind": "kill"}).type == "ok"
    drop = {"kind": "drop-replies", "target": "random", "seed": 0, "probability": 0.5}
    while (reply := _invoke(worker, "drop-replies", drop)).value["node"] != killed:
        _invoke(worker, "heal-drop-replies", {"kind": "drop-replies"})
        drop["seed"] += 1
    assert reply.type == "ok"
    assert db.polls == 4  # three unanswered polls, then the node listened
    assert db.failpoints[(killed, "http.drop-reply")] == {"probability": 0.5}
    never = RestartingDB(deaf_polls=0)
    other = NemesisWorker(FakeControl(), NODES, never)  # type: ignore[arg-type]
    assert _invoke(other, "drop-replies", drop).type == "ok"
    assert never.polls == 0  # not restarted by this worker: not asked
