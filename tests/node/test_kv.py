"""A 3-node cluster serves linearizable reads and writes over HTTP."""

from __future__ import annotations

import asyncio

from ember.client import EmberClient
from ember.kv import partition_of
from tests.node.conftest import MakeCluster


def test_three_nodes_read_write_cas_delete(make_cluster: MakeCluster) -> None:
    """Writes through any node land on the partition leader; every node then reads them."""
    cluster = make_cluster(["n1", "n2", "n3"])
    cluster.start_all()
    for part in range(8):
        cluster.wait_leader(f"part-{part}")

    async def run() -> None:
        keys = [f"k{i}" for i in range(24)]
        assert len({partition_of(k, 8) for k in keys}) == 8  # every partition used
        async with EmberClient(cluster.urls(["n2"])) as c:
            for i, key in enumerate(keys):
                out = await c.put(key, i)
                assert out.type == "ok", out
        for name in cluster.names:
            # A fresh client per node: reads go through whichever leader holds the key.
            async with EmberClient(cluster.urls([name])) as c:
                for i, key in enumerate(keys):
                    got = await c.get(key)
                    assert got.type == "ok", (name, key, got)
                    assert got.value == i, (name, key, got)
        async with EmberClient(cluster.urls(["n3"])) as c:
            assert (await c.cas("k0", 0, "new")).value == [True, 0]
            assert (await c.cas("k0", 0, "other")).value == [False, "new"]
            assert (await c.cas("absent", None, 1)).value == [True, None]
            assert (await c.delete("k1")).value is True
            assert (await c.delete("k1")).value is False
            assert (await c.get("k1")).value is None
            assert (await c.get("k0")).value == "new"

    asyncio.run(run())


def test_non_leader_answers_with_leader_address(make_cluster: MakeCluster) -> None:
    """A KV request to a follower gets 421 naming the leader's id and URL."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader("part-0")
    follower = next(n for n in cluster.names if n != leader)
    # A follower names the leader once it has heard from it.
    cluster.wait_for(
        lambda: cluster.status(follower)["groups"]["part-0"]["leader"] == leader,
        f"{follower} to learn the leader",
    )
    code, doc = cluster.call(follower, "PUT", "/kv/x", {"value": 1})
    assert code == 421
    assert doc["leader"] == leader
    assert doc["leader_url"] == cluster.url(leader)
    assert doc["outcome"] == "fail"
    code, doc = cluster.call(follower, "GET", "/kv/x")
    assert code == 421, "a follower must never answer a read from its own state"
