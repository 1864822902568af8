"""Rebalance step 5 on a real 5-node cluster: replicas left out of stable stop,
come back when assigned again and catch up; a primary hands its lease over
before its replica stops; clients keep reading and writing throughout."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ember.client import EmberClient
from tests.node.cluster import ProcCluster
from tests.rebalance.flow import (
    FLAGS,
    NAMES,
    PARTITIONS,
    alter,
    assignments,
    audit,
    call_any,
    is_converged,
    live,
    targets,
)

NODE_PARTITIONS = PARTITIONS + 1  # the nodes' --partitions (FLAGS): the client hashes alike


def _hosts(cluster: ProcCluster, p: int) -> set[str]:
    """The live nodes whose /admin/status lists part-p (its replica runs there)."""
    return {n for n in live(cluster) if f"part-{p}" in cluster.status(n)["groups"]}


def _converged(cluster: ProcCluster, want: dict[int, list[str]] | None = None) -> bool:
    """The flow's convergence, and exactly the stable nodes run each zone
    partition's replica."""
    try:
        want = targets(cluster) if want is None else want
        return is_converged(cluster, want) and all(
            _hosts(cluster, p) == set(peers) for p, peers in want.items()
        )
    except (AssertionError, OSError, KeyError):
        return False


def _wait(cluster: ProcCluster, want: dict[int, list[str]] | None = None) -> None:
    cluster.wait_for(lambda: _converged(cluster, want), "replicas to follow the assignments")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    """Five nodes, groups booted on n1-n3, the zone created with 3 replicas, settled."""
    root: Path = tmp_path_factory.mktemp("replicas")
    c = ProcCluster(root, NAMES, bootstrap=NAMES[:3], extra=FLAGS)
    try:
        c.start_all()

        def created() -> bool:
            try:
                alter(c, replicas=3, partitions=PARTITIONS)
            except (AssertionError, OSError):
                return False
            return True

        c.wait_for(created, "the zone to be created")
        _wait(c)
        yield c
    finally:
        c.close()


async def _write_read(urls: list[str], prefix: str, count: int) -> None:
    """Write `count` keys and read each back through ember.client (a `fail` is
    certainly not applied, so it is retried; an `unknown` write fails the test)."""
    async with EmberClient(urls, timeout_s=10.0, partitions=NODE_PARTITIONS) as c:
        for i in range(count):
            for _ in range(50):
                out = await c.put(f"{prefix}{i}", i)
                if out.type != "fail":
                    break
                await asyncio.sleep(0.05)
            assert out.ok, out
            for _ in range(50):
                got = await c.get(f"{prefix}{i}")
                if got.type != "fail":
                    break
                await asyncio.sleep(0.05)
            assert (got.type, got.value) == ("ok", i), got


def _events(cluster: ProcCluster, node: str, kind: str, group: str) -> list[dict[str, Any]]:
    return [e for e in cluster.events(node) if e["kind"] == kind and e.get("group") == group]


def test_three_to_five_and_back_stops_the_removed_replicas(cluster: ProcCluster) -> None:
    """3 -> 5 -> 3: the two nodes left out of each partition stop its replica
    (not in status, replica-stopped audited) and the group keeps serving."""
    alter(cluster, replicas=5)
    _wait(cluster, dict.fromkeys(range(PARTITIONS), NAMES))
    asyncio.run(_write_read(cluster.urls(), "five-", 30))
    alter(cluster, replicas=3)
    _wait(cluster)
    for p, peers in targets(cluster).items():
        removed = set(NAMES) - set(peers)
        assert len(removed) == 2
        for node in removed:
            assert f"part-{p}" in cluster.status(node)["stopped"]
            assert _events(cluster, node, "replica-stopped", f"part-{p}"), (node, p)
    # Every node's URL, stopped replicas included: the client routes around them.
    asyncio.run(_write_read(cluster.urls(), "three-", 30))


def test_raising_back_restarts_the_replicas_and_they_catch_up(cluster: ProcCluster) -> None:
    """3 -> 5 after the above: the stopped replicas start again, catch up, and hold
    the same applied digest as the others at the same index."""
    stopped = {p: set(NAMES) - set(peers) for p, peers in targets(cluster).items()}
    asyncio.run(_write_read(cluster.urls(), "while-stopped-", 20))
    alter(cluster, replicas=5)
    _wait(cluster, dict.fromkeys(range(PARTITIONS), NAMES))
    # Enough entries per partition that each log passes an `applied` digest
    # mark (every 50 indexes) after the restart, on every replica.
    asyncio.run(_write_read(cluster.urls(), "after-", 3 * 60))
    for p, nodes in stopped.items():
        group = f"part-{p}"
        for node in nodes:
            assert _events(cluster, node, "replica-started", group), (node, p)

        def same_digest(group: str = group) -> bool:
            marks = {n: {e["index"]: e["digest"] for e in _events(cluster, n, "applied", group)}
                     for n in NAMES}  # fmt: skip
            common = set.intersection(*(set(m) for m in marks.values()))
            if not common:
                return False
            top = max(common)
            return len({marks[n][top] for n in NAMES}) == 1

        cluster.wait_for(same_digest, f"{group}'s replicas to agree on a digest")
        # The restarted replicas' mark lies past where they stopped: they caught up.
        for node in nodes:
            stop_at = _events(cluster, node, "replica-stopped", group)[-1]["applied"]
            marks = [e["index"] for e in _events(cluster, node, "applied", group)]
            assert max(marks) > stop_at


def test_a_primary_leaving_stable_hands_its_lease_over_first(cluster: ProcCluster) -> None:
    """The node holding partition 0's primary lease is filtered out of the zone:
    its lease goes to another node before its replica of part-0 stops."""
    alter(cluster, replicas=3)
    _wait(cluster)
    holder = call_any(cluster, "GET", "/admin/placement")["leases"]["0"]["holder"]
    alter(cluster, filter=[n for n in NAMES if n != holder])
    try:
        cluster.wait_for(lambda: holder not in call_any(cluster, "GET", "/admin/zones/default")
                         ["data_nodes"], f"{holder} to leave the data nodes")  # fmt: skip
        _wait(cluster)
        assert "part-0" in cluster.status(holder)["stopped"]
        stopped = _events(cluster, holder, "replica-stopped", "part-0")[-1]
        # The lease ended before: released by the holder, or granted to another.
        handed = [e for evs in audit(cluster).values() for e in evs
                  if e.get("partition") == 0 and e["wall"] < stopped["wall"]
                  and ((e["kind"] == "lease-released" and e["holder"] == holder)
                       or (e["kind"] == "lease-granted" and e["holder"] != holder
                           and e["wall"] > _last_grant_to(cluster, holder)))]  # fmt: skip
        assert handed, "the primary's replica stopped while it still held the lease"

        def granted_in_stable() -> bool:
            lease = call_any(cluster, "GET", "/admin/placement")["leases"].get("0")
            return lease is not None and lease["holder"] in assignments(cluster)[0]["stable"]

        cluster.wait_for(granted_in_stable, "a new primary of partition 0 from stable")
        asyncio.run(_write_read(cluster.urls(), "handover-", 10))
    finally:
        alter(cluster, filter=["*"])
    _wait(cluster)


def _last_grant_to(cluster: ProcCluster, holder: str) -> float:
    grants = [e["wall"] for evs in audit(cluster).values() for e in evs
              if e["kind"] == "lease-granted" and e.get("partition") == 0
              and e["holder"] == holder]  # fmt: skip
    return max(grants, default=0.0)


def test_a_restarted_node_keeps_its_replicas_stopped(cluster: ProcCluster) -> None:
    """A node killed while its replica of part-0 is stopped comes back with it
    stopped from the start (before any pass of the manager), and nothing else moves."""
    _wait(cluster)
    node = sorted(set(NAMES) - set(assignments(cluster)[0]["stable"]))[0]
    assert "part-0" in cluster.status(node)["stopped"]
    cluster.kill(node)
    cluster.start(node)
    events = cluster.events(node)
    since = max(i for i, e in enumerate(events) if e["kind"] == "started")
    mine = [e for e in events[since:] if e.get("group") == "part-0"]
    # start() reports the configuration each replica holds; nothing else may come first.
    first = next(e for e in mine if e["kind"] != "config-applied")
    assert (first["kind"], first.get("reason")) == (
        "replica-stopped",
        "stopped before the restart",
    ), mine[:5]
    _wait(cluster)
