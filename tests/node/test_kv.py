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


def test_a_cut_off_leader_never_serves_a_stale_read(make_cluster: MakeCluster) -> None:
    """ReadIndex on real nodes: a leader that cannot reach a quorum confirms no
    read, so while the others elect a new leader and overwrite the key, the old
    leader answers no read at all, never the old value."""
    cluster = make_cluster(
        ["n1", "n2", "n3"], extra=["--partitions", "1", "--election-timeout-ticks", "50"]
    )
    cluster.start_all()
    old = cluster.wait_leader("part-0")
    others = [n for n in cluster.names if n != old]

    async def write(urls: list[str], value: int) -> None:
        async with EmberClient(urls, partitions=1) as c:
            assert (await c.put("k", value)).type == "ok"

    asyncio.run(write([cluster.url(old)], 1))
    code, doc = cluster.call(old, "POST", "/admin/failpoints/raft.message.drop", {"probability": 1})
    assert code == 200, doc

    # Straight to the old leader (no redirect-following client): while it still
    # believes it leads, and again once the others moved on without it.
    for phase in ("cut off", "replaced"):
        if phase == "replaced":
            new = cluster.wait_leader("part-0", among=others)
            asyncio.run(write(cluster.urls(others), 2))
        code, doc = cluster.call(old, "GET", "/kv/k?timeout_s=1")
        assert code != 200, f"{phase}: the old leader served a read: {doc}"
        assert isinstance(doc, dict)
        assert doc["outcome"] == "fail"
    assert cluster.call(old, "DELETE", "/admin/failpoints/raft.message.drop")[0] == 200
    cluster.wait_for(
        lambda: cluster.status(old)["groups"]["part-0"]["leader"] == new, f"{old} to follow {new}"
    )

    async def final() -> object:
        async with EmberClient(cluster.urls(), partitions=1) as c:
            out = await c.get("k")
            assert out.type == "ok", out
            return out.value

    assert asyncio.run(final()) == 2
