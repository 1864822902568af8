"""Failpoints on a running cluster: dropped appends hold one follower back."""

from __future__ import annotations

import asyncio

from ember.client import EmberClient
from tests.node.conftest import MakeCluster


def test_dropping_appends_to_a_peer_holds_it_back_until_disabled(
    make_cluster: MakeCluster,
) -> None:
    """With appends to one follower dropped, writes commit without it; once the
    failpoint is off the follower catches up to the same applied index."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader("part-0")
    lagger = next(n for n in cluster.names if n != leader)

    def last(node: str) -> int:
        return int(cluster.status(node)["groups"]["part-0"]["last_index"])

    # Let the leader's first entry reach everyone, so nothing is in flight.
    cluster.wait_for(lambda: last(lagger) == last(leader), "the followers to hold the log")
    body = {"peer": lagger, "probability": 1.0}
    code, doc = cluster.call(leader, "POST", "/admin/failpoints/raft.append.drop", body)
    assert code == 200, doc
    assert cluster.status(leader)["failpoints"] == ["raft.append.drop"]
    held = last(lagger)

    async def write() -> list[str]:
        async with EmberClient([cluster.url(leader)], partitions=1) as c:
            return [(await c.put(f"d{i}", i)).type for i in range(30)]

    assert asyncio.run(write()) == ["ok"] * 30
    leader_last = last(leader)
    assert last(lagger) == held
    assert leader_last >= held + 30
    assert cluster.call(leader, "DELETE", "/admin/failpoints/raft.append.drop")[0] == 200

    def caught_up() -> bool:
        return cluster.status(lagger)["groups"]["part-0"]["applied"] >= leader_last

    cluster.wait_for(caught_up, f"{lagger} to catch up")
    kinds = [(e["name"], e["enabled"]) for e in cluster.events(leader) if e["kind"] == "failpoint"]
    assert kinds == [("raft.append.drop", True), ("raft.append.drop", False)]


def test_a_dropped_reply_leaves_the_write_applied_and_its_outcome_unknown(
    make_cluster: MakeCluster,
) -> None:
    """http.drop-reply: the leader serves the put in full and closes the
    connection instead of answering, so the client reports it unknown while
    the value is there; status and error answers still come, and once the
    failpoint is off every answer comes again."""
    cluster = make_cluster(["n1", "n2", "n3"], extra=["--partitions", "1"])
    cluster.start_all()
    leader = cluster.wait_leader("part-0")
    code, doc = cluster.call(leader, "POST", "/admin/failpoints/http.drop-reply", {})
    assert code == 200, doc

    async def put_then_bad() -> tuple[str, str]:
        async with EmberClient([cluster.url(leader)], partitions=1) as c:
            put = await c.put("lost", 7)
            bad = await c.put("x" * 2000, 1)  # refused with 400: an error passes
            return put.type, bad.type

    assert asyncio.run(put_then_bad()) == ("unknown", "fail")
    assert cluster.status(leader)["failpoints"] == ["http.drop-reply"]  # status is never dropped
    assert cluster.call(leader, "DELETE", "/admin/failpoints/http.drop-reply")[0] == 200

    async def read() -> object:
        async with EmberClient([cluster.url(leader)], partitions=1) as c:
            got = await c.get("lost")
            assert got.type == "ok", got
            return got.value

    assert asyncio.run(read()) == 7
