"""The `rebalance` workload: alter ember's zone in loops while register traffic runs.

Each op asks one change of the zone `default` (POST /admin/zones/default):
the replica count (3, 4 or 5), the partition count (2 to `max_partitions`:
partitions beyond it leave the zone, and come back later), or the data
nodes through the zone's `filter` (one node left out, or everyone back in).
History ops have f "alter-zone" and value: what was asked. The completion's
value: `asked`, the `zone` it produced, the metastore `revision` of the
alter and the `targets` each zone partition then heads to (rendezvous
assignment over the data nodes read right after; the placement driver may
see other data nodes a moment later).

Between alters, a few times a minute, a stale Rebalance request as a
deposed placement driver would send it (`workloads.stale_request`; its own
seeded schedule, so the alters are the same with or without it).

Outcomes: ok when the alter committed; fail when it certainly did not (a
conflicting concurrent alter: 409; a refused zone: 400; the metastore
unreachable before the write); info when it may have (a timeout).

The generator stops at `stop_ns` with one last alter that brings every
partition back into the zone with every node admitted (`restore`): a
partition that left the zone mid-rebalance is no longer driven, and its
pending assignment would otherwise never clear, so the cluster could not
converge in the quiet period. The restore is asked again (RESTORE_RETRY_S
apart, each time of the next node, at most RESTORE_TRIES times) until one
is ok: the time limit is also when the nemesis heals, and an alter sent to
a node still starting up fails, which once left partition 3 outside the
zone with its pending set and the convergence checker reporting ember for
the harness's omission (a sim property run, seed 37). A restore that
never succeeds leaves that for the checker to report; its
`rebalance-not-finished` then says the restore never applied, how often it
was asked and its last error (`checkers.convergence.unrestored`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ember.client import EmberClient
from ember.zones import assign
from harness.interpreter import Reply, ReplyType
from workloads.generator import PENDING, Completion, Context, Event, Generator, Op, Result
from workloads.stale_request import StaleRequests, is_stale_op, send_stale

ZONE = "default"
REPLICAS = (3, 4, 5)
MIN_PARTITIONS = 2
KINDS = ("replicas", "partitions", "filter")
RESTORE_TRIES = 20
RESTORE_RETRY_S = 0.5


class RebalanceGen(Generator):
    """Seeded zone alters spaced by `gap_s` on average, then `restore` at `stop_ns`;
    the `stale` requests' ops in between when given."""

    def __init__(
        self,
        rng: random.Random,
        nodes: Sequence[str],
        *,
        max_partitions: int,
        stop_ns: int,
        gap_s: float = 4.0,
        stale: StaleRequests | None = None,
    ) -> None:
        self.rng, self.nodes = rng, sorted(nodes)
        self.max_partitions, self.stop_ns = max_partitions, stop_ns
        self.gap_ns = int(gap_s * 1e9)
        # What the generator believes the zone is (updated from completions).
        self.zone: dict[str, Any] = {"replicas": 3, "partitions": max_partitions,
                                     "filter": ["*"]}  # fmt: skip
        self.next_ns: int | None = None
        self.restored = False  # the restore was ok, or given up
        self.restoring = False  # a restore is in flight
        self.restore_tries = 0
        self.retry_ns: int | None = None  # when to ask the restore again
        self.stale = stale

    def restore(self) -> dict[str, Any]:
        """The last alter: every partition in the zone, every node admitted."""
        return {"partitions": self.max_partitions, "filter": ["*"]}

    def choose(self) -> dict[str, Any]:
        """One change of the zone as believed now (never a no-op)."""
        counts = [c for c in self._counts() if c != self.zone["partitions"]]
        # A zone of one partition has no other count to change to.
        kind = self.rng.choice(KINDS if counts else tuple(k for k in KINDS if k != "partitions"))
        if kind == "replicas":
            return {"replicas": self.rng.choice([r for r in REPLICAS
                                                 if r != self.zone["replicas"]])}  # fmt: skip
        if kind == "partitions":
            return {"partitions": self.rng.choice(counts)}
        if self.zone["filter"] != ["*"] and self.rng.random() < 0.6:
            return {"filter": ["*"]}  # the node left out joins again
        admitted = [
            n for n in self.nodes if self.zone["filter"] == ["*"] or n in self.zone["filter"]
        ]
        out = self.rng.choice(admitted)  # a node still in: the one out now joins back
        return {"filter": [n for n in self.nodes if n != out]}

    def _counts(self) -> range:
        """The partition counts an alter may set: from MIN_PARTITIONS up, or from
        one when the zone is that small (zone_partitions 1 or 2)."""
        low = MIN_PARTITIONS if self.max_partitions > MIN_PARTITIONS else 1
        return range(low, self.max_partitions + 1)

    def op(self, ctx: Context) -> Result:
        if self.restored:
            return None
        if self.restoring:
            return PENDING
        if self.retry_ns is not None:
            return self._restore_op(max(ctx.time_ns, self.retry_ns))
        if self.next_ns is None:
            self.next_ns = ctx.time_ns + int(self.rng.random() * self.gap_ns)
        if self.next_ns >= self.stop_ns or ctx.time_ns >= self.stop_ns:
            return self._restore_op(max(ctx.time_ns, self.stop_ns))
        stale_at = self.stale.due(ctx.time_ns) if self.stale is not None else None
        if self.stale is not None and stale_at is not None and stale_at < self.next_ns:
            return self.stale.take(ctx.time_ns, int(self.zone["partitions"]))
        at = max(self.next_ns, ctx.time_ns)  # a slow alter pushes the schedule back
        self.next_ns = at + int((0.5 + self.rng.random()) * self.gap_ns)
        return Op(f="alter-zone", value=self.choose(), time_ns=at)

    def _restore_op(self, at: int) -> Op:
        self.restoring, self.retry_ns = True, None
        self.restore_tries += 1
        return Op(f="alter-zone", value=self.restore(), time_ns=at)

    def update(self, ctx: Context, event: Event) -> None:
        if isinstance(event, Completion) and event.op.f == "alter-zone":
            zone = event.value.get("zone") if isinstance(event.value, dict) else None
            if isinstance(zone, dict):
                self.zone.update({k: zone[k] for k in ("replicas", "partitions", "filter")
                                  if k in zone})  # fmt: skip
            if self.restoring and event.op.value == self.restore():
                self.restoring = False
                if event.type == "ok" or self.restore_tries >= RESTORE_TRIES:
                    self.restored = True
                else:  # failed, or unknown (a timeout): the same alter again is harmless
                    self.retry_ns = max(ctx.time_ns, event.time_ns) + int(RESTORE_RETRY_S * 1e9)


async def alter_zone(
    client: EmberClient, node_of: Mapping[str, str], changes: dict[str, Any]
) -> Reply:
    """POST the alter, then read the data nodes; classify as the module doc says."""
    out = await client.request("POST", f"/admin/zones/{ZONE}", changes)
    node = node_of.get(out.url or "")
    if not out.ok or not isinstance(out.value, dict):
        client.move_on()  # another node next time
        kind: ReplyType = "fail" if out.type == "fail" else "info"
        return Reply(type=kind, value={"asked": changes}, error=out.error, node=node)
    zone, revision = out.value.get("zone") or {}, out.value.get("revision")
    value: dict[str, Any] = {"asked": changes, "zone": zone, "revision": revision}
    shown = await client.request("GET", f"/admin/zones/{ZONE}", base=out.url)
    if shown.ok and isinstance(shown.value, dict) and shown.value.get("data_nodes"):
        data_nodes = list(shown.value["data_nodes"])
        value["data_nodes"] = data_nodes
        value["targets"] = {str(p): assign(ZONE, p, data_nodes, int(zone.get("replicas", 3)))
                            for p in range(int(zone.get("partitions", 0)))}  # fmt: skip
    return Reply(type="ok", value=value, node=node)


class RebalanceWorker:
    """Runs alter-zone ops through one admin `EmberClient`."""

    def __init__(self, client: EmberClient, node_of: Mapping[str, str]) -> None:
        self.client, self.node_of = client, node_of

    async def invoke(self, op: Op) -> Reply:
        """alter-zone or a stale request; anything else is a harness bug (info)."""
        if is_stale_op(op):
            return await send_stale(self.client, self.node_of, list(op.value["partitions"]))
        if op.f != "alter-zone":
            return Reply(type="info", error=f"rebalance workload has no op {op.f!r}")
        return await alter_zone(self.client, self.node_of, dict(op.value))
