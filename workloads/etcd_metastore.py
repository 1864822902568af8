"""The etcd `metastore` workload: revisioned reads, conditional txns, watches.

Client ops speak docs/models.md's `metastore` model, so the
linearizability checker reads them and `checkers/revisions.py` checks
their revisions: `get` ({value, mod_revision, revision}), `put` (result:
the revision of the write) and `invoke` ({if, then, else} as an etcd txn;
result {succeeded, revision}) over a few keys under one prefix.

Watch ops (f "watch", their own thread kind) check etcd's watch streams:
each watches the prefix from a revision for `WATCH_S` seconds and
completes with the events delivered, in order. The next watch resumes at
the revision after the last one delivered (so, across a run, the streams
must deliver every write once, in order, with no gaps), through a member
chosen at random, so a resume crosses members and faults.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness.dbs.etcd_client import EtcdClient, watch
from harness.interpreter import Reply
from workloads.generator import Completion, Context, Event, Fn, Generator, Op, Result

PREFIX = "m/"
DEFAULT_KEYS = 4
VALUES = 4
WATCH_S = 3.0
_MIX = (("get", 0.4), ("put", 0.3), ("invoke", 0.3))


def key_names(count: int = DEFAULT_KEYS) -> list[str]:
    """The workload's keys (all under PREFIX, so one watch sees them all)."""
    return [f"{PREFIX}{i}" for i in range(count)]


def _condition(r: random.Random, key: str) -> dict[str, Any]:
    kind = r.choice(("value", "exists", "version"))
    if kind == "value":
        return {"key": key, "target": "value", "op": "eq", "value": r.randrange(VALUES)}
    if kind == "exists":
        return {"key": key, "target": "exists", "value": r.random() < 0.7}
    return {"key": key, "target": "version", "op": r.choice(("lt", "gt")), "value": r.randrange(4)}


def metastore_ops(rng: random.Random, keys: int = DEFAULT_KEYS) -> Generator:
    """An endless seeded stream of get / put / invoke ops over `keys` keys."""
    names = key_names(keys)
    fs = [f for f, _ in _MIX]
    weights = [w for _, w in _MIX]

    def make(r: random.Random) -> Op:
        key = r.choice(names)
        f = r.choices(fs, weights)[0]
        if f == "get":
            return Op(f="get", key=key)
        if f == "put":
            return Op(f="put", key=key, value=r.randrange(VALUES))
        other = r.choice(names)
        then = [{"op": "put", "key": key, "value": r.randrange(VALUES)}]
        orelse = (
            [{"op": "put", "key": other, "value": r.randrange(VALUES)}] if r.random() < 0.5 else []
        )
        value = {"if": [_condition(r, key)], "then": then, "else": orelse}
        return Op(f="invoke", key=key, value=value)

    return Fn(make, rng)


def final_reads(keys: int = DEFAULT_KEYS) -> list[Op]:
    """One read per key after healing."""
    return [Op(f="get", key=k) for k in key_names(keys)]


class WatchGen(Generator):
    """Back-to-back watches of PREFIX, each resuming after the last delivered revision."""

    def __init__(self) -> None:
        self.next_revision = 1

    def op(self, ctx: Context) -> Result:
        """The next watch (one at a time per thread)."""
        return Op(f="watch", value={"prefix": PREFIX, "from": self.next_revision},
                  time_ns=ctx.time_ns)  # fmt: skip

    def update(self, ctx: Context, event: Event) -> None:
        """Resume after the last revision the completed watch delivered."""
        if isinstance(event, Completion) and event.op.f == "watch":
            events = event.value if isinstance(event.value, list) else []
            if events:
                self.next_revision = max(int(e["revision"]) for e in events) + 1


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
