"""The `cancel-race` workload: trigger a rebalance, then cancel it at a chosen phase.

Each round is two history ops on one admin thread:

1. f "alter-zone" (as `workloads.rebalance`): a replica-count change that
   moves some partitions; its completion reports the alter's revision.
2. f "cancel-rebalance", value {after, phase, delay_ms, stale, partitions}:
   the worker waits for a pending assignment written after `after` on the
   first of `partitions` (a seeded order) to get one (one read of the
   assignment keys, then a metastore watch on them), then for the seeded
   `phase` of that partition's change, polling the assignment keys and the
   group leader's /admin/status `stage` every `POLL_S`:

   | phase         | sent when                                                  |
   |---------------|------------------------------------------------------------|
   | `pending`     | pending is written (before the change starts)              |
   | `catching-up` | the leader's change is catching up (before catch-up ends) |
   | `joint`       | the joint entry is in force (as it commits)                |
   | `stable`      | the stable entry is in force, pending not yet cleared      |

   then sleeps `delay_ms` (seeded: 0 to a few hundred ms, around the
   boundary) and POSTs /admin/cancel-rebalance naming the pending revision,
   or on purpose a STALE one (`stale`: one below it) that the revision
   guard must refuse. A phase never seen (too short to catch, or pending
   cleared first) sends the cancel anyway when the wait ends.

Outcomes, in the completion's value `outcome` (with `partition`,
`pending_revision` named, `revision` of the cancel invoke, `old`, `new`,
`stable` at the end and `phase_seen`: the stage when it was sent):

- `cancelled` (ok): the cancel was written and the group ended at old;
- `already-done` (ok: the cancel was written but the group ended at new,
  cannot-cancel; fail: refused because the rebalance finished first or
  there was no pending rebalance any more);
- `rejected-stale` (fail): a stale pending revision was named and refused;
- `unresolved` (ok): written, but pending had not cleared in `SETTLE_S`;
- a cancel whose HTTP call timed out is info (it may have been written).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import aiohttp

from ember.client import EmberClient
from ember.metastore.client import MetaRefused, watch_stream
from ember.rebalance.keys import parse
from harness.interpreter import Reply
from workloads.generator import PENDING, Completion, Context, Event, Generator, Op, Result
from workloads.rebalance import REPLICAS, alter_zone

PHASES = ("pending", "catching-up", "joint", "stable")
DELAYS_MS = ((0, 0), (0, 50), (50, 300))  # at the boundary, just after, well after
STALE_P = 0.25
POLL_S = 0.02
FIND_S = 10.0  # wait for the alter's pending to appear
PHASE_S = 8.0  # wait for the phase
SETTLE_S = 30.0  # wait for a written cancel to resolve


def choose_cancel(rng: random.Random, after: int, partitions: int) -> dict[str, Any]:
    """A cancel op's value: phase, delay, stale or not, and partition order."""
    stale = rng.random() < STALE_P
    phase = "pending" if stale else rng.choice(PHASES)
    lo, hi = rng.choice(DELAYS_MS)
    order = list(range(partitions))
    rng.shuffle(order)
    return {"after": after, "phase": phase, "delay_ms": rng.randint(lo, hi), "stale": stale,
            "partitions": order}  # fmt: skip


def phase_reached(
    phase: str, stage: str | None, peers: Sequence[str] | None, new: Sequence[str], pending: bool
) -> bool:
    """Whether a partition whose change has `stage` and voters `peers` (leader's
    view), and pending still written or not, is at (or past) `phase`."""
    order = {"none": 0, "catching-up": 1, "joint": 2, "stable": 3}
    if not pending:
        return True  # the rebalance finished: nothing left to wait for
    if phase == "pending":
        return True
    at_new = peers is not None and sorted(peers) == sorted(new)
    if stage is None:
        return False
    if stage == "none":
        return at_new  # the change already finished: past every phase
    return order.get(stage, 0) >= order[phase]


class CancelRaceGen(Generator):
    """Trigger alter, then its cancel, in turn, until `stop_ns` (no restore:
    the rebalance workload's last alter, or the cluster's own, clears it)."""

    def __init__(self, rng: random.Random, *, partitions: int, stop_ns: int,
                 gap_s: float = 3.0) -> None:  # fmt: skip
        self.rng, self.partitions, self.stop_ns = rng, partitions, stop_ns
        self.gap_ns = int(gap_s * 1e9)
        self.replicas = 3
        self.after: int | None = None  # the last ok trigger's revision, until cancelled
        self.zone_partitions = partitions
        self.next_ns: int | None = None
        self.waiting = False

    def op(self, ctx: Context) -> Result:
        if self.waiting:
            return None if ctx.time_ns >= self.stop_ns else PENDING
        if self.next_ns is None:
            self.next_ns = ctx.time_ns + int(self.rng.random() * self.gap_ns)
        # A round can outlast its gap (a cancel waits for its phase and its end):
        # the clock, not only the schedule, says when to stop.
        if self.next_ns >= self.stop_ns or ctx.time_ns >= self.stop_ns:
            return None
        self.waiting = True
        if self.after is not None:
            value = choose_cancel(self.rng, self.after, self.zone_partitions)
            self.after = None
            return Op(f="cancel-rebalance", value=value, time_ns=ctx.time_ns)
        at = max(self.next_ns, ctx.time_ns)
        self.next_ns = at + int((0.5 + self.rng.random()) * self.gap_ns)
        replicas = self.rng.choice([r for r in REPLICAS if r != self.replicas])
        return Op(f="alter-zone", value={"replicas": replicas}, time_ns=at)

    def update(self, ctx: Context, event: Event) -> None:
        if not isinstance(event, Completion) or event.op.f not in ("alter-zone",
                                                                   "cancel-rebalance"):  # fmt: skip
            return
        self.waiting = False
        if event.op.f != "alter-zone" or not isinstance(event.value, dict):
            return
        zone = event.value.get("zone")
        if isinstance(zone, dict):
            self.replicas = int(zone.get("replicas", self.replicas))
            self.zone_partitions = int(zone.get("partitions", self.zone_partitions))
        if event.type == "ok" and isinstance(event.value.get("revision"), int):
            self.after = int(event.value["revision"])


class CancelWorker:
    """Runs the alter-zone and cancel-rebalance ops of `CancelRaceGen`."""

    def __init__(self, client: EmberClient, node_of: Mapping[str, str]) -> None:
        self.client, self.node_of = client, node_of

    async def invoke(self, op: Op) -> Reply:
        """alter-zone (the trigger) or cancel-rebalance (see the module doc)."""
        if op.f == "alter-zone":
            return await alter_zone(self.client, self.node_of, dict(op.value))
        if op.f == "cancel-rebalance":
            return await self._cancel(dict(op.value))
        return Reply(type="info", error=f"cancel-race workload has no op {op.f!r}")

    async def _get(self, path: str, base: str | None = None) -> Any:
        out = await self.client.request("GET", path, base=base)
        if not out.ok:
            self.client.move_on()
        return out.value if out.ok and isinstance(out.value, dict) else None

    async def _keys(self) -> dict[tuple[int, str], tuple[Any, int]] | None:
        snap = await self._snapshot()
        return snap[0] if snap is not None else None

    async def _snapshot(self) -> tuple[dict[tuple[int, str], tuple[Any, int]], int] | None:
        """Every assignment key as (value, mod_revision), and the revision read at."""
        doc = await self._get("/admin/assignments")
        if doc is None:
            return None
        keys = {(int(a["partition"]), str(a["kind"])): (a.get("value"), int(a["mod_revision"]))
                for a in doc.get("assignments", [])}  # fmt: skip
        return keys, int(doc.get("revision", 0))

    async def _find(self, v: dict[str, Any]) -> tuple[int, Any, Any, int] | None:
        """The first partition (in v's order) with a pending written after the alter.

        One read of the keys, then a watch on them from that revision: a
        pending that is written and cleared between two reads is still seen
        (a poll missed it), and the wait costs a stream, not a read every
        `POLL_S` for up to `FIND_S` when the alter moved nothing.
        """

        def pick(keys: dict[tuple[int, str], tuple[Any, int]]) -> tuple[int, Any, Any, int] | None:
            for p in v["partitions"]:
                pending = keys.get((p, "pending"))
                if pending is not None and pending[1] > int(v["after"]):
                    return p, (keys.get((p, "stable")) or (None, 0))[0], pending[0], pending[1]
            return None

        try:
            async with asyncio.timeout(FIND_S):
                while True:
                    snap = await self._snapshot()
                    if snap is not None:
                        found = pick(snap[0])
                        if found is not None:
                            return found
                        # Closed here, not by the collector: the stream's connection
                        # ends when the wait does.
                        async with contextlib.aclosing(self._watch(*snap)) as changes:
                            async for keys in changes:
                                found = pick(keys)
                                if found is not None:
                                    return found
                    await asyncio.sleep(POLL_S)  # the read or the watch failed: read again
        except TimeoutError:
            return None

    async def _watch(
        self, keys: dict[tuple[int, str], tuple[Any, int]], revision: int
    ) -> AsyncGenerator[dict[tuple[int, str], tuple[Any, int]], None]:
        """`keys` (read at `revision`) kept current by a metastore watch, after
        each change; ends when the stream does."""
        stream = watch_stream(self.client._http(), self.client.current, prefix="zone.",
                              start=revision + 1)  # fmt: skip
        try:
            async with contextlib.aclosing(stream) as items:
                async for item in items:
                    parsed = parse(str(item.get("key", "")))
                    if parsed is None:
                        continue  # a progress line or another key under zone.
                    name = (parsed[1], parsed[2])
                    if item.get("type") == "delete":
                        keys.pop(name, None)
                    else:
                        keys[name] = (item.get("value"), int(item["revision"]))
                    yield keys
        except (MetaRefused, aiohttp.ClientError, TimeoutError, OSError, ValueError):
            self.client.move_on()  # the next read and watch go to another node

    async def _leader(self, group: str) -> str | None:
        best: tuple[int, str] | None = None
        for url in self.client.urls:
            doc = await self._get("/admin/status", base=url)
            g = (doc or {}).get("groups", {}).get(group)
            term = int(g.get("term", 0)) if isinstance(g, dict) else -1
            if (
                isinstance(g, dict)
                and g.get("role") == "leader"
                and (best is None or term > best[0])
            ):
                best = (term, url)
        return best[1] if best else None

    async def _await_phase(self, v: dict[str, Any], p: int, new: Any, rev: int) -> str:
        """Poll until the phase (module doc); returns the stage seen when it ended."""
        group, seen = f"part-{p}", "unseen"
        deadline = time.monotonic() + PHASE_S
        leader = None if v["phase"] == "pending" else await self._leader(group)
        polls = 0
        while time.monotonic() < deadline:
            pending = True
            if polls % 5 == 0 or leader is None:  # the keys less often than the stage
                keys = await self._keys()
                pending = keys is None or (keys.get((p, "pending")) or (None, -1))[1] == rev
            stage, peers = None, None
            if leader is not None:
                g = ((await self._get("/admin/status", base=leader)) or {}).get("groups", {})
                st = g.get(group)
                if isinstance(st, dict) and st.get("role") == "leader":
                    stage, peers = str(st.get("stage")), st.get("conf", {}).get("peers")
                    seen = stage
                else:
                    leader = await self._leader(group)
            if not pending:
                return "done"
            if phase_reached(v["phase"], stage, peers, new or [], pending):
                return seen if v["phase"] != "pending" else "pending"
            polls += 1
            await asyncio.sleep(POLL_S)
        return f"timeout ({seen})"

    async def _cancel(self, v: dict[str, Any]) -> Reply:
        found = await self._find(v)
        if found is None:
            return Reply(type="fail", value={**v, "outcome": "no-rebalance"},
                         error="the alter moved no partition in time")  # fmt: skip
        p, old, new, rev = found
        phase_seen = await self._await_phase(v, p, new, rev)
        await asyncio.sleep(int(v["delay_ms"]) / 1000)
        named = rev - 1 if v["stale"] else rev
        body = {"partition": p, "pending_revision": named}
        base = self.client.current
        out = await self.client.request("POST", "/admin/cancel-rebalance", body, base=base)
        node = self.node_of.get(out.url or "")
        value: dict[str, Any] = {"partition": p, "pending_revision": named, "actual_pending": rev,
                                 "old": old, "new": new, "phase": v["phase"],
                                 "phase_seen": phase_seen, "stale": v["stale"]}  # fmt: skip
        if out.type == "unknown":
            return Reply(type="info", value=value, error=out.error, node=node)
        doc = out.value if isinstance(out.value, dict) else {}
        if not out.ok:
            why = "already-done" if doc.get("error") == "no-rebalance" else "refused"
            return Reply(type="fail", value={**value, "outcome": why}, error=out.error, node=node)
        value["revision"] = doc.get("revision")
        if not doc.get("succeeded"):
            why = "rejected-stale" if v["stale"] else "already-done"
            return Reply(type="fail", value={**value, "outcome": why}, error=why, node=node)
        value["outcome"], value["stable"] = await self._resolve(p, rev, old, new)
        return Reply(type="ok", value=value, node=node)

    async def _resolve(self, p: int, rev: int, old: Any, new: Any) -> tuple[str, Any]:
        """Wait until the cancelled pending is gone; which side stable ended at."""
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline:
            keys = await self._keys()
            if keys is not None:
                pending = keys.get((p, "pending"))
                if (pending is None or pending[1] != rev) and (p, "cancel") not in keys:
                    stable = (keys.get((p, "stable")) or (None, 0))[0]
                    if sorted(stable or []) == sorted(old or []):
                        return "cancelled", stable
                    if sorted(stable or []) == sorted(new or []):
                        return "already-done", stable
                    return "resolved-other", stable
            await asyncio.sleep(0.2)
        return "unresolved", None
