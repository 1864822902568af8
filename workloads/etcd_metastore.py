"""The etcd side of the `metastore` workload: its client worker and watch worker.

The generator, the op shapes and the watch generator are shared with ember
(`workloads.metastore`): etcd speaks the `BASIC_MIX` (get / put / invoke as
an etcd txn) and its watch streams, ember also deletes and reads the past.
Re-exported here for the etcd callers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from harness.dbs.etcd_client import EtcdClient, watch
from harness.interpreter import Reply
from workloads.generator import Op
from workloads.metastore import (
    DEFAULT_KEYS,
    PREFIX,
    VALUES,
    WATCH_S,
    WatchGen,
    final_reads,
    key_names,
    metastore_ops,
)

__all__ = ["DEFAULT_KEYS", "PREFIX", "VALUES", "WATCH_S", "MetastoreWorker", "WatchGen",
           "WatchWorker", "final_reads", "key_names", "metastore_ops"]  # fmt: skip


class MetastoreWorker:
    """Runs metastore ops through one `EtcdClient`."""

    def __init__(self, client: EtcdClient, node_of: Mapping[str, str]) -> None:
        self.client, self.node_of = client, node_of

    async def invoke(self, op: Op) -> Reply:
        """get / put / invoke; anything else is a harness bug (info)."""
        key = op.key or ""
        if op.f == "get":
            out = await self.client.get_rev(key)
        elif op.f == "put":
            out = await self.client.put(key, op.value)
        elif op.f == "invoke":
            v = op.value
            out = await self.client.txn(v["if"], v["then"], v["else"])
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
        """Watch for `watch_s`; ok with the events, info with them when cut off early."""
        url = self.client.pick()
        events, error = await watch(self.client._http(), url, op.value["prefix"],
                                    int(op.value["from"]), self.watch_s)  # fmt: skip
        node = self.node_of.get(url)
        if error is None:
            return Reply(type="ok", value=events, node=node)
        return Reply(type="info", value=events, error=error, node=node)
