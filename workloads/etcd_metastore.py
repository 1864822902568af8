"""The etcd side of the `metastore` workload: its client worker and watch worker.

The generator, the op shapes and the watch generator are shared with ember
(`workloads.metastore`): get / put / invoke (an etcd txn), and with the
plan's metastore traffic (workloads.meta_traffic) deletes, reads at a past
revision, compactions and probing, single-key and slow watches, each
recorded with its progress notifications and compaction refusal.
Re-exported here for the etcd callers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harness.dbs.etcd_client import EtcdClient, watch
from harness.interpreter import Reply
from workloads.generator import Op
from workloads.meta_traffic import SLOW_READ_S
from workloads.metastore import (
    BASIC_MIX,
    DEFAULT_KEYS,
    FULL_MIX,
    PREFIX,
    VALUES,
    WATCH_S,
    WatchGen,
    closing_watch,
    final_reads,
    key_names,
    metastore_ops,
    metastore_streams,
    watch_reply,
)

__all__ = ["BASIC_MIX", "DEFAULT_KEYS", "FULL_MIX", "PREFIX", "VALUES", "WATCH_S",
           "MetastoreWorker", "WatchGen", "WatchWorker", "closing_watch", "final_reads",
           "key_names", "metastore_ops", "metastore_streams"]  # fmt: skip


class MetastoreWorker:
    """Runs metastore ops through one `EtcdClient`."""

    def __init__(self, client: EtcdClient, node_of: Mapping[str, str]) -> None:
        self.client, self.node_of = client, node_of

    async def invoke(self, op: Op) -> Reply:
        """get / put / invoke / delete / range / compact; anything else is a harness
        bug (info)."""
        key = op.key or ""
        if op.f == "get":
            out = await self.client.get_rev(key)
        elif op.f == "put":
            out = await self.client.put(key, op.value)
        elif op.f == "invoke":
            v = op.value
            out = await self.client.txn(v["if"], v["then"], v["else"])
        elif op.f == "delete":
            out = await self.client.delete(key)
        elif op.f == "range":
            out = await self.client.range_at(key, int(op.value["revision"]))
        elif op.f == "compact":
            out = await self.client.compact(int(op.value["revision"]))
        else:
            return Reply(type="info", error=f"metastore workload has no op {op.f!r}")
        node = self.node_of.get(out.url or "")
        if out.ok:
            return Reply(type="ok", value=out.value, node=node)
        return Reply(type="fail" if out.type == "fail" else "info", error=out.error, node=node)


class WatchWorker:
    """Runs watch ops against a random member (urls() says which are members)."""

    def __init__(self, client: EtcdClient, node_of: Mapping[str, str],
                 urls: Callable[[], Sequence[str]], watch_s: float = WATCH_S) -> None:  # fmt: skip
        self.client, self.node_of, self.urls, self.watch_s = client, node_of, urls, watch_s

    async def invoke(self, op: Op) -> Reply:
        """Watch for `watch_s`: ok with the stream, info with it when cut off early,
        fail when refused (a compacted start)."""
        url = self.client.pick()
        slow = SLOW_READ_S if op.value.get("slow") else 0.0
        stream, error = await watch(self.client._http(), url, op.value, self.watch_s, slow)
        return watch_reply(stream, error, self.node_of.get(url))
