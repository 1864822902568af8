"""The placement driver: one active at a time, elected through a lease key.

Theory of operation
-------------------
Every node runs a `PlacementDriver` loop; the one holding the metastore key
`placement.driver` ({holder, expires}) acts, the others only try to take a
lease nobody renewed (an invoke guarded on the key's mod revision, so two
cannot both win). Both sides judge time on their monotonic clocks, never by
`expires` (a wall time, for people): the holder acts only until a lease
minus a margin after it sent the write that took or renewed the lease, and
checks so before every action; another node takes over only after the same
record stayed unchanged for a lease plus the margin by its own clock. A
clock fault (a wall clock jumped or strobed) then cannot make two drivers
act at once (INVARIANTS M9, checkers/authority.py).

The active driver watches the `zone.` prefix (a metastore watch from the
revision of its first read after becoming active; after a disconnect it
resumes from the last revision it saw, on any metastore node; a compacted
revision makes it start again from the next tick's fresh read). Every watch
event runs a tick at once, so a zone alter, a data-node write, a trigger's
pending or a cancel is acted on without waiting for a timer. A slow
periodic tick (`tick_s`) remains for what no key announces: renewing its
lease, watching the primaries' leases, probing the nodes for the data
nodes, and resending requests.

Each tick the active driver:

1. reads the zone's keys directly from the metastore (a linearizable range,
   never a cache): so right after a failover it sees the pending / cancel
   keys as they are and resends their requests, and a watch event that a
   lagging replica delivered late can never make it act on old keys;
2. stops there while the zone does not exist (it is created over the admin API);
3. probes the nodes, applies the zone's scale-up / scale-down delays and
   writes `data_nodes` when they change;
4. for each partition whose trigger (the newest of the zone config and data
   nodes revisions) it has not applied, runs the trigger invoke;
5. grants the primary-replica lease of each partition that has no live
   holder in stable (a live stable peer, the group's leader when it is
   one); the holder renews it itself (`_lease`, ember.rebalance.agent); a
   new primary, or one this driver did not grant, is told
   `last_seen_revision` = current revision - 1, and a primary that left
   stable is revoked first;
6. sends CancelRebalance if `cancel` is set (cancel wins), else Rebalance if
   `pending` is set, to the primary, stamped with the current revision;
   repeats are harmless (requests are idempotent) and resent periodically.
   A cancel's answer names the group's outcome once known; `cannot-cancel`
   (the group already committed new) is the driver's to finish: it logs a
   `cancel-request` event with direction `cannot-cancel` and runs the usual
   done invoke (stable = new, cancel removed, pending = planned or none).

Measured (bench/rebalance_latency.py, 5 local nodes, 20 ms Raft ticks, zone
alter to the first Rebalance request sent): polling every 0.5 s, median
889 ms (min 728, max 1041, 6 rounds): the alter waited for a tick, and the
trigger's pending for the next one. Watching (periodic tick 1 s): median
39 ms (min 36, max 54, 6 rounds).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ember import clock
from ember.metastore.client import MetaClient, MetaRefused, MetaUnavailable
from ember.placement.peers import Peers
from ember.placement.watch import ZoneWatch
from ember.rebalance.invokes import done_invoke, put_if_unchanged, trigger_invoke
from ember.rebalance.keys import assignments_prefix, config_key, data_nodes_key, key
from ember.rebalance.lease import LEASE_MARGIN, PRIMARY_LEASE_S, RecordAges
from ember.rebalance.listener import ZONE, lease_key
from ember.runtime import NodeRuntime
from ember.waiting import wait_set
from ember.zones import Zone, assign, next_data_nodes

log = logging.getLogger(__name__)
DRIVER_KEY = "placement.driver"
RESEND_S = 2.0
CANCEL_ASK_S = 0.5
TICK_LIMIT_S = 20.0


class LeaseLostError(Exception):
    """The driver lease ran out in the middle of a tick: stop acting."""


class PlacementDriver:
    """One node's placement-driver loop (active only while it holds the lease)."""

    def __init__(
        self, runtime: NodeRuntime, meta: MetaClient, peers: Peers, *, lease_s: float = 3.0,
        tick_s: float = 1.0,
    ) -> None:  # fmt: skip
        self.runtime = runtime
        self.meta = meta
        self.peers = peers
        self.lease_s, self.tick_s = lease_s, tick_s
        self.active = False
        self.revision = 0  # the highest metastore revision seen
        self._lease_mod = 0
        self._lease_expires = 0.0  # by this node's wall clock, as written in the key
        self._valid_until = 0.0  # by the monotonic clock: act only before this
        self._applied: dict[int, int] = {}  # partition -> trigger revision applied
        self._sent: dict[int, tuple[Any, float]] = {}  # partition -> (request, when)
        self._changed_at: dict[str, float] = {}
        self._alive: set[str] = set()
        self.leases: dict[int, dict[str, Any]] = {}  # partition -> the grant this driver made
        # Lease records this driver does not hold (its own key, each partition's), by age.
        self._ages = RecordAges()
        self.step = "idle"  # the tick's current step, for the log
        self.ticks = 0
        self._kick = asyncio.Event()
        self.watch = ZoneWatch(meta, self._kick)

    async def run(self) -> None:
        """Tick until cancelled: on every watch event, else every `tick_s`."""
        try:
            while True:
                try:
                    # A tick waits only on bounded calls; this bound is a safety net
                    # so one wedged step can never stop the driver for good.
                    async with asyncio.timeout(TICK_LIMIT_S):
                        await self.tick()
                except TimeoutError:
                    log.warning("placement driver tick took over %ss at %s", TICK_LIMIT_S,
                                self.step)  # fmt: skip
                except (MetaUnavailable, MetaRefused) as err:
                    log.info("placement driver: metastore: %s", err)
                except LeaseLostError as err:
                    log.info("placement driver: %s", err)
                except Exception:
                    log.exception("placement driver tick failed")
                await wait_set(self._kick, self.tick_s)
                # Cleared before the tick reads: an event during it wakes the next.
                self._kick.clear()
        finally:
            await self.watch.stop()

    def _audit(self, event: dict[str, Any], partition: int | None = None) -> None:
        group = f"part-{partition}" if partition is not None else None
        # The driver lease (its key's mod revision) this driver holds: M9's evidence.
        self.runtime.audit.record({**event, "driver_lease": self._lease_mod}, group)

    async def _acting(self, act: str, partition: int | None = None) -> None:
        """Audit, before it happens, an action taken under the driver lease (M9,
        checkers/authority.py): a write to the assignments or the leases, a
        grant or revoke, a request to a primary. A lease running low is renewed
        first, so a slow tick goes on instead of starting over; LeaseLostError
        when it cannot be (taken over, or run out by the monotonic clock)."""
        if not self._trusts_own_clock():
            if self._valid_until - time.monotonic() < self.lease_s / 2:
                await self._renew()
            if time.monotonic() >= self._valid_until:
                raise LeaseLostError(f"driver lease {self._lease_mod} ran out before {act}")
        self._audit({"kind": "driver-acting", "act": act}, partition)

    async def _renew(self) -> None:
        """Renew the lease this driver holds (guarded on its own record)."""
        held = self._lease_mod
        if not await self._write_lease(held, clock.wall()):
            raise LeaseLostError(f"driver lease {held} was taken over")

    async def _write_lease(self, mod_revision: int, now: float) -> bool:
        """Take or renew the lease, guarded on the record read at `mod_revision`;
        the lease counts on the monotonic clock from before the write."""
        value = {"holder": self.runtime.id, "expires": now + self.lease_s}
        sent = time.monotonic()
        out = await self.meta.invoke(put_if_unchanged(DRIVER_KEY, mod_revision, value))
        if out["succeeded"]:
            self._lease_mod = self._seen(out["revision"])
            self._lease_expires = now + self.lease_s
            self._valid_until = sent + self.lease_s * (1 - LEASE_MARGIN)
            self._ages.forget(DRIVER_KEY)
        return bool(out["succeeded"])

    def _seen(self, revision: int) -> int:
        self.revision = max(self.revision, revision)
        return self.revision

    async def _hold_lease(self, now: float) -> bool:
        """Whether this node holds the driver lease for this tick (taking or renewing it).

        Judged on the monotonic clock, never on the key's wall-clock `expires`
        (kept for people reading the key): a clock fault moves wall clocks, and a
        taker whose clock ran ahead would take a lease its holder still acts under
        (M9; what `--nemesis clock` found). The holder counts its lease from
        before the write that took or renewed it; another node takes it only
        after seeing the same record, unchanged, for a lease and a margin.
        """
        if self.active and now < self._lease_expires and self._trusts_own_clock():
            return True  # planted: no read, no renewal while the own clock says valid
        rec = await self.meta.get(DRIVER_KEY)
        self._seen(rec["revision"])
        value = rec["value"] if isinstance(rec["value"], dict) else None
        mine = value is not None and value.get("holder") == self.runtime.id
        mono = time.monotonic()
        if mine and rec["mod_revision"] == self._lease_mod:
            if self._valid_until - mono > self.lease_s / 2:
                return True
        elif value is not None and not mine:
            # Another's record: take it only once it is older than a lease and the margin.
            age = self._ages.unchanged_for(DRIVER_KEY, rec["mod_revision"])
            if age < self.lease_s * (1 + LEASE_MARGIN):
                return False
        return await self._write_lease(rec["mod_revision"], now)

    def _trusts_own_clock(self) -> bool:
        fp = self.runtime.failpoints
        return fp.any_enabled and fp.hit("placement.trust-own-clock") is not None

    async def tick(self) -> None:
        """One round of the driver (see the module doc)."""
        now = clock.wall()
        self.ticks += 1
        self.step = "lease"
        if not await self._hold_lease(now):
            if self.active:
                self._audit({"kind": "placement-driver", "active": False})
                await self.watch.stop()
            self.active = False
            return
        if not self.active:
            # Failover: forget everything cached; the keys are read fresh below.
            self.active = True
            self._applied.clear()
            self._sent.clear()
            self._audit({"kind": "placement-driver", "active": True, "revision": self.revision})
        self.step = "read"
        snap = await self.meta.range("zone.")
        self._seen(snap["revision"])
        self.watch.ensure(snap["revision"])
        kv = {item["key"]: item for item in snap["kvs"]}
        zone = self._zone(kv)
        if zone is None:
            return
        self.step = "data-nodes"
        if await self.maybe_write_data_nodes(zone, kv, now):
            # Triggers read one snapshot: the zone as of the same revision as its
            # data nodes. Mixing this write into an older snapshot could stamp a
            # trigger past a zone change that snapshot did not hold, and lose it.
            return
        self.step = "triggers"
        await self._triggers(zone, kv)
        for p in range(zone.partitions):
            self.step = f"lease {p}"
            holder = await self._lease(zone, p, kv, now)
            if holder is not None:
                self.step = f"requests {p}"
                await self._requests(zone, p, kv, holder, now)
        self.step = "idle"

    def _zone(self, kv: dict[str, Any]) -> Zone | None:
        # Nothing to place until someone creates the zone (POST /admin/zones/default):
        # a cluster whose peers are changed by hand is left alone.
        rec = kv.get(config_key(ZONE))
        return Zone(**rec["value"]) if rec is not None else None

    async def maybe_write_data_nodes(self, zone: Zone, kv: dict[str, Any], now: float) -> bool:
        """Probe the nodes and write the zone's data nodes if they changed; whether it wrote."""
        nodes = sorted(self.runtime.cfg.peers)
        alive = await self.peers.alive(nodes)
        for n in nodes:
            if (n in alive) != (n in self._alive):
                self._changed_at[n] = now
        self._alive = alive
        rec = kv.get(data_nodes_key(ZONE))
        current = list(rec["value"]) if rec else []
        new = (
            next_data_nodes(zone, current, alive, self._changed_at, now)
            if rec else sorted(n for n in alive if zone.admits(n))
        )  # fmt: skip
        if new != current and new:
            mod = rec["mod_revision"] if rec else 0
            await self._acting("write-data-nodes")
            out = await self.meta.invoke(put_if_unchanged(data_nodes_key(ZONE), mod, new))
            self._seen(out["revision"])
            return True
        return False

    async def _triggers(self, zone: Zone, kv: dict[str, Any]) -> None:
        nodes_rec = kv.get(data_nodes_key(ZONE))
        if nodes_rec is None:
            return
        ts = max(kv[config_key(ZONE)]["mod_revision"], nodes_rec["mod_revision"])
        for p in range(zone.partitions):
            if self._applied.get(p) == ts:
                continue
            if key(ZONE, p, "stable") not in kv:
                # A partition added by a partition-count change: its group as it is.
                peers = await current_peers(self.runtime, self.peers, p)
                await self._acting("write-stable", p)
                await self.meta.put(key(ZONE, p, "stable"), peers)
            new = assign(zone.id, p, nodes_rec["value"], zone.replicas)
            await self._acting("trigger", p)
            out = await self.meta.invoke(trigger_invoke(ZONE, p, new, ts))
            self._seen(out["revision"])
            self._applied[p] = ts

    async def _lease(self, zone: Zone, p: int, kv: dict[str, Any], now: float) -> str | None:
        """The partition's primary, after granting its lease if needed (None: no one).

        The holder renews the key itself (ember.rebalance.agent). A holder in
        stable that renews keeps it; one this driver did not grant (a
        failover, or the holder restarted) is granted again without a write,
        so that its last seen moves past an older driver's requests. A
        holder that left stable is revoked (it stops at once) before another
        is named; one that does not answer keeps its lease until its record
        has stayed unchanged for a lease plus the margin by this driver's
        clock (it may be acting, cut off from this driver only: M9)."""
        stable = kv.get(key(ZONE, p, "stable"), {}).get("value") or []
        candidates = [n for n in stable if n in self._alive]
        rec = await self.meta.get(lease_key(ZONE, p))
        value = rec["value"] if isinstance(rec["value"], dict) else None
        holder = value.get("holder") if value else None
        age = self._ages.unchanged_for(p, rec["mod_revision"])
        if holder is not None and age < PRIMARY_LEASE_S * (1 + LEASE_MARGIN):
            if holder in candidates:
                granted = self.leases.get(p, {}).get("holder") == holder
                if not granted and not await self._grant(p, str(holder), rec["mod_revision"]):
                    return None
                return str(holder)
            if holder not in self._alive:
                return None  # wait its lease out
            # Graceful handover: the old primary stops before the new one starts.
            await self._acting("revoke", p)
            code, _ = await self.peers.call(holder, "POST", "/internal/primary/revoke",
                                            {"zone": ZONE, "partition": p})  # fmt: skip
            if code != 200:
                return None
        if not candidates:
            return None
        leader = self.runtime.leader_of(f"part-{p}") if f"part-{p}" in self.runtime.groups else None
        new_holder = leader if leader is not None and leader in candidates else candidates[0]
        lease = {"holder": new_holder, "expires": now + PRIMARY_LEASE_S}
        await self._acting("write-lease", p)
        out = await self.meta.invoke(
            put_if_unchanged(lease_key(ZONE, p), rec["mod_revision"], lease)
        )
        rev = self._seen(out["revision"])
        if not out["succeeded"] or not await self._grant(p, new_holder, rev):
            return None
        return new_holder

    async def _grant(self, p: int, holder: str, lease_revision: int) -> bool:
        """Tell `holder` it is primary under the lease record at `lease_revision`;
        its last seen starts at this driver's current revision - 1."""
        grant = {"zone": ZONE, "partition": p, "lease_revision": lease_revision,
                 "last_seen_revision": self.revision - 1}  # fmt: skip
        await self._acting("grant", p)
        code, answer = await self.peers.call(holder, "POST", "/internal/primary/grant", grant)
        if code != 200:
            log.info("grant of %s to %s failed: %s %s", p, holder, code, answer)
            return False
        self._audit({"kind": "lease-granted", "partition": p, "holder": holder,
                     "revision": lease_revision, "zone": ZONE}, p)  # fmt: skip
        self._sent.pop(p, None)
        self.leases[p] = {"holder": holder, "revision": lease_revision}
        return True

    async def _requests(
        self, zone: Zone, p: int, kv: dict[str, Any], holder: str, now: float
    ) -> None:
        cancel = kv.get(key(ZONE, p, "cancel"))
        pending = kv.get(key(ZONE, p, "pending"))
        stable = kv.get(key(ZONE, p, "stable"), {}).get("value") or []
        if cancel is not None:
            c = cancel["value"]
            kind, request = (
                "cancel",
                {"pending_revision": c["pending_revision"], "old": c["old"], "new": c["new"]},
            )
        elif pending is not None:
            kind = "rebalance"
            request = {
                "pending_revision": pending["mod_revision"],
                "old": stable,
                "new": pending["value"],
            }
        else:
            self._sent.pop(p, None)
            return
        ident = (kind, holder, request["pending_revision"])
        last = self._sent.get(p)
        # A cancel's outcome arrives in a repeat's answer: ask again sooner.
        wait = CANCEL_ASK_S if kind == "cancel" else RESEND_S
        if last is not None and last[0] == ident and now - last[1] < wait:
            return
        body = {**request, "zone": ZONE, "partition": p, "revision": self.revision}
        await self._acting(f"request-{kind}", p)
        code, answer = await self.peers.call(holder, "POST", f"/internal/{kind}", body)
        event = "rebalance-request" if kind == "rebalance" else "cancel-request"
        self._audit({"kind": event, "direction": "sent", "partition": p, "zone": ZONE,
                     "request_revision": self.revision, "peers": request["new"],
                     "answer": answer if code == 200 else code}, p)  # fmt: skip
        if code == 200 and kind == "cancel" and answer.get("outcome") == "cannot-cancel":
            await self._cannot_cancel(p, kv, request)
        elif code == 200:
            self._sent[p] = (ident, now)
        elif code == 409 and isinstance(answer, dict) and answer.get("error") == "not-primary":
            # The holder restarted and forgot its lease: grant it again next tick
            # (with last seen = current revision - 1, as for a new primary).
            self.leases.pop(p, None)

    async def _cannot_cancel(self, p: int, kv: dict[str, Any], request: dict[str, Any]) -> None:
        """The group already committed the cancelled change's new peers: log it and
        finish as a usual rebalance done (seed 004). The done invoke is guarded on
        pending and planned as read, so a repeat, or a snapshot gone stale, changes
        nothing; the cancel key, if still there, brings the next tick back here."""
        snap = {k: v for k, v in kv.items() if k.startswith(assignments_prefix(ZONE, p))}
        spec = done_invoke(snap, ZONE, p, request["new"], request["pending_revision"])
        await self._acting("done", p)
        out = await self.meta.invoke(spec)
        self._seen(out["revision"])
        done = "written" if out["succeeded"] else "already done"
        # INFO: a cancel racing a change's commit is the race rebalance is built
        # for (cancel-race runs meet it in about half the seeds), not a fault.
        log.info("cancel of part-%s: the change to %s already finished; done %s",
                 p, request["new"], done)  # fmt: skip
        self._audit({"kind": "cancel-request", "direction": "cannot-cancel", "partition": p,
                     "zone": ZONE, "request_revision": self.revision, "peers": request["new"],
                     "old": request["old"], "pending_revision": request["pending_revision"],
                     "done": bool(out["succeeded"]), "revision": out["revision"]}, p)  # fmt: skip

    def status(self) -> dict[str, Any]:
        """What /admin/placement shows of this node's driver."""
        return {"node": self.runtime.id, "active": self.active, "revision": self.revision,
                "step": self.step, "ticks": self.ticks, "watched": self.watch.events,
                "leases": {str(p): v for p, v in sorted(self.leases.items())}}  # fmt: skip


async def current_peers(runtime: NodeRuntime, peers: Peers, partition: int) -> list[str]:
    """The voters of a partition's group as its leader reports them when it is
    idle (no change running, not joint); else as this node knows them. This
    node's own replica may be stopped or removed and its view stale, which
    would write a stable assignment the group does not have."""
    _, st = await peers.leader_status(f"part-{partition}")
    if st is not None and st.get("stage") == "none" and not st.get("conf", {}).get("joint"):
        voters = st.get("conf", {}).get("peers")
        if isinstance(voters, list) and voters:
            return sorted(str(v) for v in voters)
    return group_peers(runtime, partition)


def group_peers(runtime: NodeRuntime, partition: int) -> list[str]:
    """The voters of a partition's group as this node knows them (its boot voters
    if it does not host the group)."""
    group = runtime.groups.get(f"part-{partition}")
    if group is None or not group.raw.status().conf.peers:
        return sorted(runtime.cfg.bootstrap)
    return sorted(group.raw.status().conf.peers)
