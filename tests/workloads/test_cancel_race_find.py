"""The cancel-race worker's wait for a pending assignment, against real nodes:
a pending written and cleared at once (between two reads of a poll) is still
found, through a node that hosts no metastore too, and a wait for one that
never comes ends at its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from ember.client import EmberClient
from ember.rebalance.keys import key
from tests.node.cluster import ProcCluster, meta_cluster
from workloads import cancel_race
from workloads.cancel_race import CancelWorker

NAMES = ["n1", "n2", "n3", "n4"]
FLAGS = ["--tick-ms", "20", "--election-timeout-ticks", "25", "--meta-nodes", "n1,n2,n3",
         "--partitions", "1"]  # fmt: skip
# Far beyond the zone's partitions: neither the driver nor a replica manager
# touches its keys, so only the test writes them.
PART = 7


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    with meta_cluster(tmp_path_factory.mktemp("cancel-find"), NAMES, FLAGS, NAMES[:3]) as c:
        yield c


def _revision(cluster: ProcCluster) -> int:
    code, out = cluster.call(cluster.wait_leader("meta", NAMES[:3]), "POST", "/meta/get",
                             {"key": key("default", PART, "stable")})  # fmt: skip
    assert code == 200, out
    return int(out["revision"])


def _flash_pending(cluster: ProcCluster, value: list[str]) -> int:
    """Write pending and delete it in the next command; the put's revision."""
    leader = cluster.wait_leader("meta", NAMES[:3])
    pending = key("default", PART, "pending")
    code, out = cluster.call(leader, "POST", "/meta/put", {"key": pending, "value": value})
    assert code == 200, out
    code, gone = cluster.call(leader, "POST", "/meta/delete", {"key": pending})
    assert code == 200, gone
    return int(out["revision"])


async def _find_while(cluster: ProcCluster, base: str, after: int, write: Any) -> Any:
    client = EmberClient([cluster.url(base)])
    try:
        worker = CancelWorker(client, {})
        task = asyncio.create_task(worker._find({"after": after, "partitions": [PART]}))
        await asyncio.sleep(0.3)  # the worker has read the keys and is watching
        written = await asyncio.to_thread(write) if write is not None else None
        return await task, written
    finally:
        await client.close()


@pytest.mark.parametrize("base", ["n1", "n4"])
def test_a_pending_written_and_cleared_at_once_is_found(cluster: ProcCluster, base: str) -> None:
    """Found with the revision it was written at, from a metastore node and from
    n4, which hosts none (its 421 names one)."""
    after = _revision(cluster)
    found, rev = asyncio.run(
        _find_while(cluster, base, after, lambda: _flash_pending(cluster, ["n1", "n2"]))
    )
    assert found == (PART, None, ["n1", "n2"], rev)


def test_no_pending_ends_the_wait_at_its_deadline(
    cluster: ProcCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pending written before `after` does not count; nothing else comes."""
    monkeypatch.setattr(cancel_race, "FIND_S", 1.5)
    after = _flash_pending(cluster, ["n3"])
    found, _ = asyncio.run(_find_while(cluster, "n1", after, None))
    assert found is None
