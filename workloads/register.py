"""The `register` workload: per-key get / put / cas on ember's user table.

Ops speak the `kv` linearizability model (docs/models.md): `get` (result:
the value, None when absent), `put` (value), `cas` (value `[expected, new]`;
result True when it swapped, False when it compared unequal). Values are
small integers so that cas often finds what it expects; keys are spread
over many partitions (`k0` .. `k<keys-1>`), each checked on its own.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from ember.client import EmberClient, Outcome
from harness.interpreter import Reply
from workloads.generator import Fn, Generator, Op

DEFAULT_KEYS = 40
VALUES = 5  # values 0..4: small, so cas succeeds often enough to matter
_MIX = (("get", 0.4), ("put", 0.35), ("cas", 0.25))


def key_names(count: int) -> list[str]:
    """The workload's keys."""
    return [f"k{i}" for i in range(count)]


def register_ops(rng: random.Random, keys: int = DEFAULT_KEYS) -> Generator:
    """An endless seeded stream of register ops over `keys` keys."""
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
        return Op(f="cas", key=key, value=[r.randrange(VALUES), r.randrange(VALUES)])

    return Fn(make, rng)


def final_reads(keys: int = DEFAULT_KEYS) -> list[Op]:
    """One read per key, after the faults are healed (the checkers' last word)."""
    return [Op(f="get", key=k) for k in key_names(keys)]


def reply_of(out: Outcome, node_of: Mapping[str, str]) -> Reply:
    """An ember client outcome as a history completion."""
    node = node_of.get(out.url or "")
    if out.type == "ok":
        return Reply(type="ok", value=out.value, node=node)
    return Reply(type="fail" if out.type == "fail" else "info", error=out.error, node=node)


class RegisterWorker:
    """Runs register ops through one `EmberClient` (one per client thread)."""

    def __init__(self, client: EmberClient, node_of: Mapping[str, str]) -> None:
        self.client = client
        self.node_of = node_of

    async def invoke(self, op: Op) -> Reply:
        """get / put / cas; anything else is a harness bug (info)."""
        key = op.key or ""
        if op.f == "get":
            return reply_of(await self.client.get(key), self.node_of)
        if op.f == "put":
            out = await self.client.put(key, op.value)
            if not out.ok:
                return reply_of(out, self.node_of)
            # No value on an ok put: an int result would read as a metastore
            # revision to the revisions checker (docs/models.md: put has no output).
            return Reply(type="ok", node=self.node_of.get(out.url or ""))
        if op.f == "cas":
            expected, new = op.value
            out = await self.client.cas(key, expected, new)
            node = self.node_of.get(out.url or "")
            if out.ok and isinstance(out.value, list):
                return Reply(type="ok", value=bool(out.value[0]), node=node)
            return reply_of(out, self.node_of)
        return Reply(type="info", error=f"register workload has no op {op.f!r}")
