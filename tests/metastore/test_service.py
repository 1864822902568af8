"""The metastore served by real nodes: commands over HTTP, redirects, compaction
errors, and a watch that resumes across a metastore leader kill without gaps."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from checkers.history import Operation
from checkers.revisions import check_order, written_keys
from checkers.watches import WriteIndex, check_watch
from ember.metastore.client import MetaClient, MetaUnavailable, watch_stream
from tests.node.cluster import ProcCluster, meta_cluster

NAMES = ["n1", "n2", "n3", "n4"]
FLAGS = ["--tick-ms", "20", "--election-timeout-ticks", "25", "--meta-nodes", "auto",
         "--partitions", "1"]  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    """Four nodes; the metastore's group on n1-n3 only."""
    root: Path = tmp_path_factory.mktemp("meta")
    with meta_cluster(root, NAMES, FLAGS, NAMES[:3]) as c:
        yield c


def _meta(cluster: ProcCluster, op: str, body: Any, node: str | None = None) -> tuple[int, Any]:
    """One /meta call at the meta leader (or `node`)."""
    target = node or cluster.wait_leader("meta", NAMES[:3])
    return cluster.call(target, "POST", f"/meta/{op}", body)


def test_commands_answer_with_revisions(cluster: ProcCluster) -> None:
    """put, get, invoke and range at a past revision answer as the model says."""
    code, first = _meta(cluster, "put", {"key": "c.a", "value": 1})
    assert code == 200
    rev = first["revision"]
    spec = {"if": [{"key": "c.a", "target": "value", "value": 1}],
            "then": [{"op": "put", "key": "c.a", "value": 2},
                     {"op": "put", "key": "c.b", "value": 3}],
            "else": []}  # fmt: skip
    code, out = _meta(cluster, "invoke", spec)
    # The placement driver renews its lease meanwhile: revisions only grow.
    assert (code, out["succeeded"], out["branch"]) == (200, True, 0)
    assert out["revision"] > rev
    code, got = _meta(cluster, "get", {"key": "c.a"})
    assert (got["value"], got["version"], got["mod_revision"]) == (2, 2, out["revision"])
    _, b = _meta(cluster, "get", {"key": "c.b"})
    assert (b["create_revision"], b["mod_revision"]) == (out["revision"], out["revision"])
    code, past = _meta(cluster, "range", {"prefix": "c.", "revision": rev})
    assert [(kv["key"], kv["value"]) for kv in past["kvs"]] == [("c.a", 1)]


def test_bad_input_and_compacted_revisions_are_clear_errors(cluster: ProcCluster) -> None:
    """A malformed invoke is 400 naming the part; a compacted revision is 410."""
    code, err = _meta(cluster, "invoke", {"if": [{"key": "x", "target": "size", "value": 1}]})
    assert code == 400
    assert "target" in err["message"]
    _, out = _meta(cluster, "put", {"key": "d.x", "value": 0})
    code, out = _meta(cluster, "compact", {"revision": out["revision"] - 1})
    assert code == 200
    code, err = _meta(cluster, "range", {"prefix": "d.", "revision": 1})
    assert (code, err["error"]) == (410, "compacted")
    code, err = cluster.call("n1", "GET", "/meta/watch?prefix=d.&from=1")
    assert (code, err["error"]) == (410, "compacted")


def test_a_node_outside_the_metastore_redirects(cluster: ProcCluster) -> None:
    """n4 hosts no metastore replica and answers 421 naming one that does."""
    code, err = cluster.call("n4", "POST", "/meta/get", {"key": "c.a"})
    assert code == 421
    assert err["leader"] in NAMES[:3]


class _Recorder:
    """Operations in the history's shape, indexed in real-time order."""

    def __init__(self) -> None:
        self.clock = itertools.count()
        self.ops: list[Operation] = []

    async def put(self, client: MetaClient, process: int, key: str, value: int) -> None:
        start = next(self.clock)
        try:
            rev = await client.put(key, value)
        except MetaUnavailable:
            return  # unknown or failed: not an acknowledged write
        end = next(self.clock)
        self.ops.append(Operation(process=process, f="put", type="ok", invoke_index=start,
                                  invoke_time=start, complete_index=end, complete_time=end,
                                  key=key, value=value, revision=rev))  # fmt: skip


async def _watch(urls: list[str], start: int, until: list[int]) -> list[dict[str, Any]]:
    """Follow prefix w. from `start`, moving to the next node when cut off, until
    a replica says it has applied revision `until[0]` (set when writing ends)."""
    got: list[dict[str, Any]] = []
    nxt = start
    async with aiohttp.ClientSession() as session:
        for url in itertools.cycle(urls):
            try:
                async for item in watch_stream(session, url, prefix="w.", start=nxt):
                    if "revision" in item:
                        got.append(item)
                        nxt = item["revision"] + 1
                    elif until and item.get("progress", -1) >= until[0]:
                        return got
            except (aiohttp.ClientError, TimeoutError, ConnectionError):
                await asyncio.sleep(0.1)
    return got


def test_watch_resumes_across_a_leader_kill_in_order_without_gaps(cluster: ProcCluster) -> None:
    """Writes while the metastore leader is killed: the watch, resumed on another
    replica from its last revision + 1, passes checkers/revisions.py."""
    leader = cluster.wait_leader("meta", NAMES[:3])
    urls = [cluster.url(leader)] + [cluster.url(n) for n in NAMES[:3] if n != leader]
    _, out = _meta(cluster, "get", {"key": "w.0"})
    start = out["revision"] + 1
    rec = _Recorder()

    async def run() -> list[dict[str, Any]]:
        until: list[int] = []
        watcher = asyncio.create_task(_watch(urls, start, until))
        client = MetaClient(urls, timeout_s=20)
        try:

            async def writer(process: int) -> None:
                for i in range(60):
                    await rec.put(client, process, f"w.{i % 4}", 100 * process + i)
                    if process == 0 and i == 20:
                        await asyncio.to_thread(cluster.kill, leader)

            await asyncio.gather(writer(0), writer(1))
            until.append(max(op.revision or 0 for op in rec.ops))
            return await asyncio.wait_for(watcher, 60)
        finally:
            await client.close()

    events = asyncio.run(run())
    cluster.start(leader)
    end = next(rec.clock)
    watch = Operation(process="watch", f="watch", type="ok", invoke_index=-1, invoke_time=-1,
                      complete_index=end, complete_time=end, value={"prefix": "w.", "from": start},
                      result=events)  # fmt: skip
    writes = sorted(((op, op.revision or 0) for op in rec.ops if written_keys(op)),
                    key=lambda w: w[1])  # fmt: skip
    assert len(writes) >= 100
    assert check_order(writes) == []
    assert check_watch(watch, WriteIndex.build(writes, rec.ops)) == []
    assert events[-1]["revision"] >= writes[-1][1]
