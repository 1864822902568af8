"""Step 5 of the rebalance (seed 004): stop the redundant replicas, start the needed ones.

Theory of operation
-------------------
Every node runs a `ReplicaManager`. It watches the `zone.` prefix of the
metastore (from the revision of its last read; after a disconnect it resumes
on any metastore node from the last revision it saw) and on every event, and
every `tick_s` besides, reconciles each partition p < zone.partitions from a
fresh linearizable read of the keys (a watch event only wakes it, as in the
placement driver, so a late event can never make it act on old keys). Once
a pass leaves every replica as the keys want it, only a watch event can
change that, so the timer slows to IDLE_TICKS x `tick_s` until a pass
leaves one waiting (a voter of the configuration in force, a lease not yet
handed over, a metastore error):

- the node is *wanted* when it is in stable, pending, planned, cancel.old or
  cancel.new: its replica runs (a stopped one is started, so the primary's
  await-replica sees it and Raft catches it up by log or snapshot);
- a node not wanted, once stable exists without it, stops its replica
  (`NodeRuntime.stop_group`: no ticks, no steps, messages dropped, not in
  /admin/status; the store stays on disk for a later start);
- never while the node is a voter or learner of the configuration in force
  (`decide`). That configuration is the one a group leader reports with its
  whole log committed and no change running (so it is the newest committed
  one); when no leader can say, it is the configuration this replica knows,
  which errs towards running. A removed replica may never receive the entry
  that removed it, hence the question to the leader.

Partitions outside the zone are left alone: other workloads change their
peers by hand.

The set of stopped replicas is kept in `replicas.stopped` in the data dir
and re-applied when the node starts, before the loop first ticks: a
restarted node does not briefly run a replica it had stopped (one that may
still believe itself a voter and campaign). The file is a hint, not a
safety record: lost, the replica runs until the first pass stops it again.

Lease handover: a node about to stop the replica of a partition whose
primary lease it holds gives the lease up itself: `PrimaryAgent.revoke`
(its job stops), then the lease key is deleted guarded on its mod revision
(a driver that rewrote it meanwhile wins; the stop waits for the next pass),
audited as `lease-released`. Asking the driver instead would make the stop
wait on a driver that may be failing over; the key delete needs only the
metastore, and the driver already treats a missing lease as "grant one among
stable" on its next tick (woken by the same watch), so a new primary from
stable follows. The replica stops only after the key no longer names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import aiohttp

from ember.metastore.client import MetaClient, MetaRefused, MetaUnavailable, watch_stream
from ember.rebalance.keys import assignments_prefix, config_key, key
from ember.rebalance.listener import ZONE, lease_key
from ember.runtime import NodeRuntime, partition_group
from ember.smallfile import replace_text
from ember.waiting import wait_set

if TYPE_CHECKING:  # ember.placement imports this module: annotations only
    from ember.placement.peers import Peers
    from ember.rebalance.agent import PrimaryAgent

log = logging.getLogger(__name__)
Decision = Literal["run", "stop", "keep"]
WATCH_RETRY_S = 0.2
IDLE_TICKS = 5  # settled: the timer is only a safety net under the watch


@dataclass(frozen=True, slots=True)
class Assignment:
    """One partition's assignment keys (None: the key is absent)."""

    stable: tuple[str, ...] | None = None
    pending: tuple[str, ...] = ()
    planned: tuple[str, ...] = ()
    cancel_old: tuple[str, ...] = ()
    cancel_new: tuple[str, ...] = ()

    @classmethod
    def from_keys(cls, kv: dict[str, Any], partition: int) -> Assignment:
        """From a `zone.` range keyed by key name."""

        def peers(kind: str) -> tuple[str, ...] | None:
            rec = kv.get(key(ZONE, partition, kind))
            return tuple(rec["value"]) if rec is not None and rec["value"] else None

        cancel = kv.get(key(ZONE, partition, "cancel"))
        c = cancel["value"] if cancel is not None and isinstance(cancel["value"], dict) else {}
        stable_rec = kv.get(key(ZONE, partition, "stable"))
        return cls(
            stable=tuple(stable_rec["value"] or ()) if stable_rec is not None else None,
            pending=peers("pending") or (),
            planned=peers("planned") or (),
            cancel_old=tuple(c.get("old") or ()),
            cancel_new=tuple(c.get("new") or ()),
        )

    def mentions(self, node: str) -> bool:
        """Whether any assignment key names `node`."""
        return any(
            node in peers
            for peers in (self.stable or (), self.pending, self.planned, self.cancel_old,
                          self.cancel_new)
        )  # fmt: skip


def members(conf: dict[str, Any]) -> frozenset[str]:
    """Voters (both sides when joint) and learners of a status `conf`."""
    sides = (conf.get("peers"), conf.get("old_peers"), conf.get("learners"))
    return frozenset(n for side in sides for n in side or ())


def conf_in_force(local: frozenset[str], leader_view: frozenset[str] | None) -> frozenset[str]:
    """The configuration to respect: a settled leader's when known, else the local one."""
    return leader_view if leader_view is not None else local


def decide(node: str, a: Assignment, in_force: frozenset[str]) -> Decision:
    """Whether `node` runs its replica of a partition, stops it, or leaves it as it is."""
    if a.mentions(node) or node in in_force:
        return "run"
    if a.stable is None:
        return "keep"  # no stable written yet: nothing says this replica is redundant
    return "stop"


def settled_leader_view(statuses: Iterable[dict[str, Any] | None]) -> frozenset[str] | None:
    """The members of the configuration in force, from group statuses of several nodes.

    Only a leader (highest term wins) that runs no change, is not joint and has
    committed its whole log can say: its newest configuration is then committed.
    """
    best: dict[str, Any] | None = None
    for st in statuses:
        if st is None or st.get("role") != "leader":
            continue
        if best is None or st.get("term", 0) > best.get("term", 0):
            best = st
    if best is None or best.get("stage") != "none" or best["conf"].get("joint"):
        return None
    if best.get("commit", -1) < best.get("last_index", 0):
        return None
    return members(best["conf"])


class ReplicaManager:
    """Starts and stops this node's KV replicas as the zone's assignments say."""

    def __init__(
        self, runtime: NodeRuntime, meta: MetaClient, peers: Peers, agent: PrimaryAgent,
        *, tick_s: float = 1.0,
    ) -> None:  # fmt: skip
        self.runtime = runtime
        self.meta = meta
        self.peers = peers
        self.agent = agent
        self.tick_s = tick_s
        self.revision = 0
        self.passes = 0
        self._kick = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self._mark = runtime.cfg.data_dir / "replicas.stopped"
        for gid in self._load():
            runtime.stop_group(gid, "stopped before the restart")

    def _load(self) -> list[str]:
        try:
            names = json.loads(self._mark.read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [str(n) for n in names] if isinstance(names, list) else []

    def _save(self) -> None:
        replace_text(self._mark, json.dumps(sorted(self.runtime.stopped)))

    async def run(self) -> None:
        """Reconcile until cancelled: on every watch event, else every `tick_s`."""
        try:
            while True:
                settled = False
                try:
                    async with asyncio.timeout(10 * self.tick_s + 10):
                        settled = await self.reconcile()
                except (MetaUnavailable, MetaRefused) as err:
                    log.info("replica manager: metastore: %s", err)
                except TimeoutError:
                    log.warning("replica manager: a pass took too long")
                except Exception:
                    log.exception("replica manager pass failed")
                await wait_set(self._kick, self.tick_s * (IDLE_TICKS if settled else 1))
                self._kick.clear()
        finally:
            task, self._watch = self._watch, None
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def reconcile(self) -> bool:
        """One pass over the zone's partitions (see the module doc); whether it left
        every replica as the keys want it (nothing to wait for but a key change)."""
        self.passes += 1
        snap = await self.meta.range("zone.")
        self.revision = max(self.revision, int(snap["revision"]))
        if self._watch is None or self._watch.done():
            loop = asyncio.get_running_loop()
            self._watch = loop.create_task(self._watch_zones(self.revision + 1))
        kv = {item["key"]: item for item in snap["kvs"]}
        zone = kv.get(config_key(ZONE))
        if zone is None or not isinstance(zone["value"], dict):
            return True  # no zone: peers are changed by hand, replicas left alone
        partitions = int(zone["value"].get("partitions", 0))
        settled = True
        for p in range(partitions):
            a = Assignment.from_keys(kv, p)
            await self._reconcile_partition(p, a)
            settled = settled and self._as_wanted(p, a)
        return settled

    def _as_wanted(self, p: int, a: Assignment) -> bool:
        """Whether this node's replica of `p` runs exactly when the keys want it
        (with no stable yet, whatever it does is what they want)."""
        gid = partition_group(p)
        if gid not in self.runtime.groups and gid not in self.runtime.stopped:
            return True  # built without the group
        return a.stable is None or (gid in self.runtime.groups) == a.mentions(self.runtime.id)

    async def _reconcile_partition(self, p: int, a: Assignment) -> None:
        gid = partition_group(p)
        me = self.runtime.id
        group = self.runtime.groups.get(gid) or self.runtime.stopped.get(gid)
        if group is None:
            return  # this node was built without the group: nothing to run or stop
        running = gid in self.runtime.groups
        if a.mentions(me):
            if not running:
                self.runtime.start_group(gid, "assigned")
                self._save()
            return
        local = members(group.status()["conf"])
        if a.stable is None or (not running and me not in local):
            # Nothing to stop, or a stopped replica with nothing pulling it back:
            # no need to ask the leaders (the zone alone changes these peers).
            decision = decide(me, a, local)
        else:
            decision = decide(me, a, conf_in_force(local, await self._leader_view(gid)))
        if decision == "run" and not running:
            self.runtime.start_group(gid, "in the configuration in force")
            self._save()
        elif decision == "stop" and running and await self._hand_over(p):
            # Read again after the awaits: a trigger may have assigned us meanwhile.
            fresh = await self.meta.range(assignments_prefix(ZONE, p))
            again = Assignment.from_keys({kv["key"]: kv for kv in fresh["kvs"]}, p)
            if not again.mentions(me) and again.stable is not None:
                self.runtime.stop_group(gid, "not in the stable assignment")
                self._save()

    async def _leader_view(self, gid: str) -> frozenset[str] | None:
        async def status(node: str) -> dict[str, Any] | None:
            if node == self.runtime.id:
                group = self.runtime.groups.get(gid)
                return group.status() if group is not None else None
            code, doc = await self.peers.call(node, "GET", "/admin/status", timeout_s=1.0)
            if code != 200 or not isinstance(doc, dict):
                return None
            st = doc.get("groups", {}).get(gid)
            return st if isinstance(st, dict) else None

        nodes = sorted(self.runtime.cfg.peers)
        return settled_leader_view(await asyncio.gather(*(status(n) for n in nodes)))

    async def _hand_over(self, p: int) -> bool:
        """Give up the primary lease of `p` if this node holds it; whether it no longer does."""
        me = self.runtime.id
        rec = await self.meta.get(lease_key(ZONE, p))
        value = rec["value"] if isinstance(rec["value"], dict) else None
        named = value is not None and value.get("holder") == me
        if not named and not self.agent.is_primary(ZONE, p):
            return True
        await self.agent.revoke(ZONE, p)
        if not named:
            return True  # the driver already moved the key on; only our role was left
        guard = {"key": lease_key(ZONE, p), "target": "mod_revision", "value": rec["mod_revision"]}
        out = await self.meta.invoke(
            {"if": [guard], "then": [{"op": "delete", "key": lease_key(ZONE, p)}]}
        )
        if out["succeeded"]:
            self.runtime.audit.record(
                {"kind": "lease-released", "zone": ZONE, "partition": p, "holder": me,
                 "revision": out["revision"]},
                partition_group(p),
            )  # fmt: skip
            return True
        return False  # the key changed meanwhile: look again on the next pass

    async def _watch_zones(self, start: int) -> None:
        """Wake a pass per event under `zone.`; returns when its revision is compacted
        (the next pass's fresh read then starts a new watch)."""
        urls, tried, nxt = self.meta.urls, 0, start
        async with aiohttp.ClientSession() as session:
            while True:
                url = urls[tried % len(urls)]
                try:
                    async for item in watch_stream(session, url, prefix="zone.", start=nxt):
                        if "error" in item:
                            self._kick.set()
                            return
                        if "progress" in item:
                            nxt = max(nxt, int(item["progress"]) + 1)
                            continue
                        # Resume at this revision, not after it: one invoke's events
                        # share a revision and a disconnect may fall between them.
                        nxt = max(nxt, int(item["revision"]))
                        self._kick.set()
                except MetaRefused as err:
                    if err.code == "410":
                        self._kick.set()
                        return
                    log.info("replica manager watch on %s: %s", url, err)
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
                    log.info("replica manager watch on %s: %r", url, err)
                tried += 1
                await asyncio.sleep(WATCH_RETRY_S)

    def status(self) -> dict[str, Any]:
        """What /admin/placement shows of this node's replicas."""
        return {"passes": self.passes, "revision": self.revision,
                "stopped": sorted(self.runtime.stopped)}  # fmt: skip
