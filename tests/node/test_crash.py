"""kill -9 of a leader under write load loses no acknowledged write."""

from __future__ import annotations

import asyncio
import itertools

from ember.client import EmberClient
from tests.node.cluster import ProcCluster
from tests.node.conftest import MakeCluster

WRITERS = 8
WRITES_BEFORE_KILL = 150
WRITES_AFTER_KILL = 150


async def _write_load(cluster: ProcCluster, victim_group: str) -> tuple[dict[str, int], str]:
    """Write unique keys from several clients; kill -9 the group's leader midway
    and restart it. Returns the acknowledged writes and the victim."""
    acked: dict[str, int] = {}
    stop = asyncio.Event()
    counter = itertools.count()

    async def writer(w: int) -> None:
        async with EmberClient(cluster.urls(), timeout_s=3.0, partitions=2) as c:
            while not stop.is_set():
                n = next(counter)
                key = f"w{w}-{n}"
                out = await c.put(key, n)
                if out.type == "ok":
                    acked[key] = n
                elif out.type == "fail":
                    await asyncio.sleep(0.02)  # no leader yet: let an election finish

    async def wait_acked(count: int) -> None:
        while len(acked) < count:
            await asyncio.sleep(0.02)

    tasks = [asyncio.create_task(writer(w)) for w in range(WRITERS)]
    try:
        await wait_acked(WRITES_BEFORE_KILL)
        victim = await asyncio.to_thread(cluster.wait_leader, victim_group)
        await asyncio.to_thread(cluster.kill, victim)
        await wait_acked(WRITES_BEFORE_KILL + WRITES_AFTER_KILL)
        await asyncio.to_thread(cluster.start, victim)
        await wait_acked(len(acked) + 50)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    return acked, victim


def test_leader_kill9_under_load_keeps_every_acknowledged_write(make_cluster: MakeCluster) -> None:
    """Every write acknowledged before, during and after a leader's kill -9 reads back."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "2"])
    cluster.start_all()
    cluster.wait_leader("part-0")
    cluster.wait_leader("part-1")
    acked, victim = asyncio.run(_write_load(cluster, "part-0"))

    async def read_back() -> list[str]:
        missing = []
        async with EmberClient(cluster.urls(), timeout_s=10.0, partitions=2) as c:
            for key, value in acked.items():
                out = await c.get(key)
                while out.type == "fail":  # e.g. an election in progress
                    await asyncio.sleep(0.05)
                    out = await c.get(key)
                if out.type != "ok" or out.value != value:
                    missing.append(f"{key}: {out}")
        return missing

    assert asyncio.run(read_back()) == []

    # The restarted victim catches up: every node applies the same entries.
    def converged() -> bool:
        docs = [cluster.status(n)["groups"] for n in cluster.names]
        return all(
            len({d[g]["applied"] for d in docs}) == 1 and docs[0][g]["applied"] > 0
            for g in ("part-0", "part-1")
        )

    cluster.wait_for(converged, f"restarted {victim} to catch up")
    assert any(e["kind"] == "started" for e in cluster.events(victim)[1:])
    digests: dict[tuple[str, int], set[str]] = {}
    for name in cluster.names:
        for e in cluster.events(name):
            if e["kind"] == "applied":
                digests.setdefault((e["group"], e["index"]), set()).add(e["digest"])
    assert digests, "nodes report applied digests"
    assert all(len(d) == 1 for d in digests.values()), "replicas diverged"


def test_crash_failpoint_exits_and_restart_keeps_acknowledged_writes(
    make_cluster: MakeCluster,
) -> None:
    """The crash failpoint kills the leader mid-round; after restart every
    acknowledged write is still there and the crash is in the audit log."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader("part-0")

    async def write(first: int, last: int) -> dict[str, int]:
        acked = {}
        async with EmberClient(cluster.urls(), timeout_s=3.0, partitions=1) as c:
            for i in range(first, last):
                out = await c.put(f"c{i}", i)
                if out.type == "ok":
                    acked[f"c{i}"] = i
        return acked

    before = asyncio.run(write(0, 20))
    assert len(before) == 20
    code, _ = cluster.call(
        leader, "POST", "/admin/failpoints/crash", {"point": "after-persist", "one_shot": True}
    )
    assert code == 200
    acked = {**before, **asyncio.run(write(20, 40))}
    proc = cluster.procs[leader]
    assert proc.wait(timeout=30) == 137
    cluster.procs.pop(leader)
    cluster.start(leader)
    assert [e["point"] for e in cluster.events(leader) if e["kind"] == "crash"] == ["after-persist"]

    async def read() -> dict[str, int]:
        got = {}
        async with EmberClient(cluster.urls(), timeout_s=5.0, partitions=1) as c:
            for key in acked:
                out = await c.get(key)
                while out.type == "fail":
                    await asyncio.sleep(0.05)
                    out = await c.get(key)
                got[key] = out.value
        return got

    assert asyncio.run(read()) == acked
