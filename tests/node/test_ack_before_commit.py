"""The planted defect `kv.ack-before-commit` on real nodes: a leader cut off
from its followers acknowledges a write that the next leader never has."""

from __future__ import annotations

import asyncio

from ember.client import EmberClient, Outcome
from ember.failpoints import KNOWN
from tests.node.conftest import MakeCluster

# A 1-2 s election timeout: the cut-off leader must still lead (it steps
# down on lost quorum) when the put reaches it on a loaded machine.
SLOW_ELECTION = ["--partitions", "1", "--election-timeout-ticks", "50"]


def test_the_failpoint_is_known_and_described() -> None:
    """The harness can switch it on by name (it refuses unknown failpoints)."""
    assert "planted" in KNOWN["kv.ack-before-commit"]


def test_a_cut_off_leader_acknowledges_a_write_the_cluster_then_loses(
    make_cluster: MakeCluster,
) -> None:
    """Acked on the old leader (and read back there), absent on the new one."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=SLOW_ELECTION)
    cluster.start_all()
    old = cluster.wait_leader("part-0")
    others = [n for n in cluster.names if n != old]

    def last(node: str) -> int:
        return int(cluster.status(node)["groups"]["part-0"]["last_index"])

    cluster.wait_for(lambda: all(last(n) == last(old) for n in others), "the followers")
    for name, body in (("kv.ack-before-commit", {}), ("raft.message.drop", {"probability": 1})):
        code, doc = cluster.call(old, "POST", f"/admin/failpoints/{name}", body)
        assert code == 200, doc

    async def on_old() -> tuple[Outcome, Outcome]:
        async with EmberClient([cluster.url(old)], partitions=1, timeout_s=2.0) as c:
            return await c.put("k", 1), await c.get("k")

    put, read_back = asyncio.run(on_old())
    assert put.type == "ok", put  # acknowledged with no follower holding it
    assert read_back.type == "ok", read_back
    assert read_back.value == 1  # served from its own uncommitted log

    new = cluster.wait_leader("part-0", among=others)
    for name in ("kv.ack-before-commit", "raft.message.drop"):
        assert cluster.call(old, "DELETE", f"/admin/failpoints/{name}")[0] == 200

    def rejoined() -> bool:
        return cluster.status(old)["groups"]["part-0"]["leader"] == new

    cluster.wait_for(rejoined, f"{old} to follow {new}")

    async def after() -> Outcome:
        async with EmberClient(cluster.urls(), partitions=1) as c:
            return await c.get("k")

    final = asyncio.run(after())
    assert final.type == "ok", final
    assert final.value is None  # the acknowledged put is gone
