"""Role targets resolved from status and placement documents (no cluster: fake fetches)."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest

from harness.control import CommandResult
from harness.process_db import ProcessDB
from nemesis.process import ProcessSpec
from nemesis.schedule import NemesisWorker
from nemesis.targets import (
    Resolver,
    UnresolvedError,
    driver_from_placement,
    leader_from_status,
    primary_from_placement,
)
from tests.runner.test_nemesis_worker import NODES, FakeControl, FakeDB
from workloads.generator import Op

NAMES = ["n1", "n2", "n3", "n4", "n5"]
NOW = 1_000_000.0


def _status(groups: dict[str, tuple[str, int]]) -> dict[str, Any]:
    return {"groups": {g: {"role": role, "term": term} for g, (role, term) in groups.items()}}


def _placement(driver: str | None, leases: dict[int, str], expires: float = NOW + 5) -> Any:
    return {
        "driver": {"holder": driver, "expires": expires} if driver else None,
        "leases": {str(p): {"holder": h, "expires": expires} for p, h in leases.items()},
        "revision": 40,
    }


STATUS = {
    "n1": _status({"meta": ("follower", 3), "part-0": ("leader", 2)}),
    "n2": _status({"meta": ("leader", 3), "part-0": ("leader", 4)}),  # the newer part-0 leader
    "n3": _status({"meta": ("leader", 2), "part-0": ("follower", 4)}),  # a deposed meta leader
    "n4": None,  # does not answer
    "n5": _status({"part-0": ("follower", 4)}),
}
PLACEMENT = _placement("n3", {0: "n4", 1: "n1"})


def _resolver(placement: Any = PLACEMENT, **kw: Any) -> Resolver:
    """Status as in STATUS; every node serves the same placement document."""
    return Resolver(NAMES, STATUS.get, lambda _n: placement, lambda: ["part-0", "part-1"],
                    clock=lambda: NOW, **kw)  # fmt: skip


def test_the_leader_is_the_self_declared_one_with_the_highest_term() -> None:
    """A deposed leader still claiming an older term loses to the newer one."""
    assert leader_from_status(STATUS, "part-0") == "n2"
    assert leader_from_status(STATUS, "meta") == "n2"
    with pytest.raises(UnresolvedError, match="no node declares itself leader of part-9"):
        leader_from_status(STATUS, "part-9")


def test_driver_and_primary_come_from_unexpired_leases() -> None:
    """The lease holders, unless the lease ran out (beyond the clock slack)."""
    assert driver_from_placement(PLACEMENT, NOW) == "n3"
    assert primary_from_placement(PLACEMENT, 1, NOW) == "n1"
    stale = _placement("n3", {0: "n4"}, expires=NOW - 10)
    with pytest.raises(UnresolvedError, match=r"placement driver lease of n3 expired 10\.0s ago"):
        driver_from_placement(stale, NOW)
    with pytest.raises(UnresolvedError, match="no placement driver yet"):
        driver_from_placement(_placement(None, {}), NOW)
    with pytest.raises(UnresolvedError, match="no primary of partition 2 yet"):
        primary_from_placement(PLACEMENT, 2, NOW)


def test_each_role_target_resolves_and_says_how() -> None:
    """group-leader, meta-leader, placement-driver and primary each name a node and a method."""
    r, rng = _resolver(), random.Random(1)
    got = r.resolve("group-leader", {"group": "part-0"}, rng)
    assert (got.node, got.resolved) == ("n2", "leader of part-0 (status, highest term)")
    assert r.resolve("meta-leader", {}, rng).node == "n2"
    driver = r.resolve("placement-driver", {}, rng)
    assert driver.node == "n3"
    assert driver.resolved.startswith("placement driver lease (asked n")
    primary = r.resolve("primary", {"trigger": {"group": "part-1", "stage": "pending"}}, rng)
    assert (primary.node, primary.resolved.split(" (")[0]) == ("n1", "primary lease of partition 1")


def test_a_primary_of_a_partition_that_never_had_one_falls_to_a_leased_one() -> None:
    """A trigger from a group outside every zone (the change-peers workload's)
    names a primary that cannot exist: the fault lands on a leased partition's
    primary and says so. A lease that ran out still resolves to nothing."""
    trigger = {"trigger": {"group": "part-4", "stage": "joint"}}
    got = {_resolver().resolve("primary", trigger, random.Random(s)) for s in range(20)}
    assert {g.node for g in got} == {"n4", "n1"}  # partitions 0 and 1 hold the leases
    assert all(g.resolved.endswith("; partition 4 has no primary lease)") for g in got), got
    lapsed = _placement("n3", {0: "n4", 4: "n2"}, expires=NOW - 10)
    with pytest.raises(UnresolvedError, match="primary of partition 4 lease of n2 expired"):
        _resolver(placement=lapsed).resolve("primary", trigger, random.Random(0))
    with pytest.raises(UnresolvedError, match="no primary of partition 4 yet"):  # none leased
        _resolver(placement=_placement("n3", {})).resolve("primary", trigger, random.Random(0))


def test_a_change_stage_trigger_names_the_leader_without_a_round_trip() -> None:
    """The node that reported JOINT for the op's group is its leader: no status is fetched."""
    asked: list[str] = []
    r = Resolver(NAMES, lambda n: asked.append(n) or None, lambda n: None, lambda: ["part-0"])
    trigger = {"group": "part-0", "stage": "joint", "node": "n5"}
    assert (
        r.resolve("leader", {"group": "part-0", "trigger": trigger}, random.Random(0)).node == "n5"
    )
    assert asked == []
    # A pending trigger comes from a metastore replica, not the group's leader: ask.
    with pytest.raises(UnresolvedError):
        r.resolve("group-leader", {"trigger": {**trigger, "stage": "pending"}}, random.Random(0))
    assert sorted(asked) == NAMES


def test_a_silent_cluster_is_unresolved_and_a_slow_node_is_not_waited_for() -> None:
    """No answer at all is Unresolved; one hanging node does not delay the others' answer."""
    with pytest.raises(UnresolvedError, match="no node answered within"):
        _resolver(placement=None, timeout_s=0.2).resolve("placement-driver", {}, random.Random(0))
    hang = threading.Event()

    def placement(node: str) -> Any:
        if node != "n2":
            hang.wait(5)  # paused nodes: the connection hangs
            return None
        return PLACEMENT

    r = Resolver(NAMES, lambda n: None, placement, list, clock=lambda: NOW, timeout_s=3)
    try:
        got = r.resolve("placement-driver", {}, random.Random(0))
    finally:
        hang.set()
    assert got.resolved == "placement driver lease (asked n2)"


def test_an_unresolved_target_completes_info_and_applies_nothing() -> None:
    """No driver elected: the kill completes info naming why; no node is killed or healed."""

    class NoPlane(FakeDB):
        def urls(self) -> dict[str, str]:
            return dict.fromkeys(NAMES, "http://127.0.0.1:9/")  # nothing listens on port 9

        def status(self, name: str) -> None:
            return None

    db = NoPlane()
    worker = NemesisWorker(FakeControl(), NODES, db)  # type: ignore[arg-type]
    op = Op(f="kill", value={"kind": "kill", "target": "placement-driver", "seed": 3})
    reply = asyncio.run(worker.invoke(op))
    assert reply.type == "info"
    assert reply.value["unresolved"].startswith("no node answered")
    assert db.killed == []
    assert not worker.active


class PidControl(FakeControl):
    """Scripts print `pid` (nothing: the process is not running)."""

    def __init__(self, pid: str) -> None:
        super().__init__()
        self.pid = pid

    def run_many(self, todo: Any, **_kw: Any) -> Any:
        self.scripts.append(dict(todo))
        return {n: CommandResult(n, c, 0, self.pid, "") for n, c in todo.items()}

    def run(self, node: str, command: str, **_kw: Any) -> CommandResult:
        # The worker's persistent shell finds no SSH client here and falls back to run.
        self.scripts.append({node: command})
        return CommandResult(node, command, 0, self.pid, "")


class Daemon(ProcessDB, FakeDB):
    """A pidfile daemon: the worker kills it in one round trip."""

    spec = ProcessSpec(pidfile="/run/d.pid", start_command="d")


@pytest.mark.parametrize(("pid", "outcome"), [("4242\n", "ok"), ("", "info")])
def test_killing_the_driver_in_one_round_trip_names_the_pid_or_says_it_is_down(
    pid: str, outcome: str
) -> None:
    """The kill script finds and kills in one go; a driver not running completes info."""
    control = PidControl(pid)
    worker = NemesisWorker(control, NODES, Daemon())  # type: ignore[arg-type]
    worker.resolver = _resolver()
    op = Op(f="kill", value={"kind": "kill", "target": "placement-driver", "seed": 3})
    reply = asyncio.run(worker.invoke(op))
    assert reply.type == outcome
    assert [list(s) for s in control.scripts] == [["n3"]]
    assert "kill -9" in control.scripts[0]["n3"]
    if outcome == "ok":
        assert (reply.value["node"], reply.value["pids"]) == ("n3", {"n3": [4242]})
        assert "n3" in reply.value["commands"]
    else:
        assert reply.value["unresolved"].startswith("the target is not running (n3, placement")
        assert not worker.active


def test_a_partition_the_zone_dropped_is_not_aimed_at() -> None:
    """A zone shrunk from 4 partitions to 2 leaves the lapsed lease keys of 2
    and 3 behind (sim seed 22 at 30 clients applied nothing: 'the primary of
    partition 3 lease of n1 expired 12.2s ago'). A free choice and a trigger
    from a dropped partition both land on a live primary of the zone."""
    doc = _placement("n3", {0: "n4", 1: "n1"})
    doc["leases"].update({"2": {"holder": "n2", "expires": NOW - 12},
                          "3": {"holder": "n1", "expires": NOW - 12}})  # fmt: skip
    doc["partitions"] = 2
    free = {_resolver(placement=doc).resolve("primary", {}, random.Random(s)) for s in range(20)}
    assert {(g.node, g.resolved.split(" (")[0]) for g in free} == {
        ("n4", "primary lease of partition 0"),
        ("n1", "primary lease of partition 1"),
    }
    trigger = {"trigger": {"group": "part-3", "stage": "pending"}}
    got = _resolver(placement=doc).resolve("primary", trigger, random.Random(0))
    assert got.resolved.endswith("; partition 3 is not in the zone (2 partitions))"), got


def test_a_free_choice_skips_lapsed_leases_until_every_one_has_lapsed() -> None:
    """Without a partition count (an older node), a free choice still prefers a
    lease that holds; when none does it says which one lapsed."""
    doc = _placement("n3", {0: "n4"})
    doc["leases"]["1"] = {"holder": "n1", "expires": NOW - 12}
    assert {_resolver(placement=doc).resolve("primary", {}, random.Random(s)).node
            for s in range(20)} == {"n4"}  # fmt: skip
    lapsed = _placement("n3", {0: "n4", 1: "n1"}, expires=NOW - 12)
    with pytest.raises(UnresolvedError, match=r"lease of n\d expired 12\.0s ago"):
        _resolver(placement=lapsed).resolve("primary", {}, random.Random(0))
