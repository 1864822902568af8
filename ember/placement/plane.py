"""The node's control plane: metastore routes, placement driver, primary agent, admin.

    POST /admin/zones/{id}          {replicas?, partitions?, filter?, scale_up_s?, scale_down_s?}
                                    creates the zone (stable = each group's voters now) or alters it
    GET  /admin/zones/{id}          -> the zone and its data nodes
    GET  /admin/assignments         -> every assignment key with value and revisions
    POST /admin/cancel-rebalance    {partition, pending_revision?} -> {succeeded, revision}
    GET  /admin/placement           -> the driver lease, primary leases, this node's roles
                                       (its driver, primaries, jobs and stopped replicas)
    /meta/...                       see ember.metastore.service
    POST /internal/...              node-to-node rebalance messages (not for clients)

This build drives one zone, `default`, whose partitions are the node's KV
groups `part-0 ..`: its partition count can change within the groups the
nodes host (`--partitions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import msgspec
from aiohttp import web

from ember import clock
from ember.api import ApiError, json_object
from ember.metastore.client import MetaClient, MetaRefused, MetaUnavailable
from ember.metastore.machine import MetastoreMachine
from ember.metastore.service import MetaService
from ember.placement.driver import DRIVER_KEY, PlacementDriver, current_peers
from ember.placement.peers import Peers
from ember.rebalance.agent import PrimaryAgent
from ember.rebalance.invokes import cancel_invoke
from ember.rebalance.keys import assignment_writes, config_key, data_nodes_key, key, parse
from ember.rebalance.listener import ZONE, GroupListener, cancel_group
from ember.rebalance.replicas import ReplicaManager
from ember.runtime import NodeRuntime
from ember.smallfile import replace_text
from ember.zones import Zone, ZoneError

log = logging.getLogger(__name__)


class ControlPlane:
    """Everything above the Raft groups on one node; `start()` / `stop()`."""

    def __init__(self, runtime: NodeRuntime, machine: MetastoreMachine | None) -> None:
        self.runtime = runtime
        cfg = runtime.cfg
        self.meta_service = MetaService(runtime, machine)
        # A process is one client of the metastore's sessions: the node id and
        # the wall clock at start tell a restarted node's process from its last.
        client_id = f"{cfg.node_id}@{int(clock.wall() * 1e9)}"
        self.meta = MetaClient([cfg.peers[n].http_url for n in cfg.meta_nodes],
                               client_id=client_id)  # fmt: skip
        self.peers = Peers(runtime)
        self.driver = PlacementDriver(runtime, self.meta, self.peers)
        self.agent = PrimaryAgent(runtime, self.meta, self.peers)
        self.listener = GroupListener(runtime, self.meta, self.peers)
        self.replicas = ReplicaManager(runtime, self.meta, self.peers, self.agent)
        self._tasks: list[asyncio.Task[None]] = []
        # A restarted replica re-applies its log from its last snapshot; reporting
        # those writes again would make its reports go back, so it remembers the
        # last revision it reported (replaced whole: a kill never leaves it torn).
        self._mark = runtime.cfg.data_dir / "assignments.reported"
        self._reported = _read_mark(self._mark)
        if machine is not None:
            machine.listeners.append(self._report_assignments)

    def _report_assignments(self, events: list[Any]) -> None:
        fresh = [ev for ev in assignment_writes(events) if ev["revision"] > self._reported]
        for ev in fresh:
            self.runtime.audit.record(ev)
        if fresh:
            self._reported = max(ev["revision"] for ev in fresh)
            replace_text(self._mark, str(self._reported))

    def add_routes(self, app: web.Application) -> None:
        """Register the admin, /meta and /internal routes."""
        self.meta_service.add_routes(app)
        app.add_routes([
            web.post("/admin/zones/{id}", self.alter_zone),
            web.get("/admin/zones/{id}", self.show_zone),
            web.get("/admin/assignments", self.assignments),
            web.post("/admin/cancel-rebalance", self.cancel_rebalance),
            web.get("/admin/placement", self.placement),
            web.post("/internal/primary/grant", self.grant),
            web.post("/internal/primary/revoke", self.revoke),
            web.post("/internal/rebalance", self.rebalance_request),
            web.post("/internal/cancel", self.cancel_request),
            web.post("/internal/group-event", self.group_event),
            web.post("/internal/cancel-group", self.cancel_group),
        ])  # fmt: skip

    async def start(self) -> None:
        """Start the placement driver loop and the replica lifecycle (step 5)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self.driver.run()), loop.create_task(self.replicas.run())]

    async def stop(self) -> None:
        """Stop the loop and every job; close HTTP sessions."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.agent.stop()
        for name in list(self.agent.jobs):
            zone, part = name.split("/")
            await self.agent.revoke(zone, int(part))
        await self.listener.stop()
        await self.meta.close()
        await self.peers.close()

    # -- admin -------------------------------------------------------------------

    async def _meta(self, op: str, body: dict[str, Any]) -> Any:
        try:
            return await self.meta.call(op, body)
        except MetaUnavailable as err:
            raise ApiError(503, "meta-unavailable", str(err), err.outcome) from None
        except MetaRefused as err:
            raise ApiError(400, err.code, str(err)) from None

    async def alter_zone(self, request: web.Request) -> web.Response:
        """Change a zone's replicas / partitions / filter / delays (a rebalance trigger)."""
        zone_id = request.match_info["id"]
        if zone_id != ZONE:
            raise ApiError(400, "bad-request", f"this build drives one zone, {ZONE!r}")
        changes = await json_object(request)
        rec = await self._meta("get", {"key": config_key(ZONE)})
        cfg = self.runtime.cfg
        base = rec["value"] or {"id": ZONE, "replicas": len(cfg.bootstrap),
                                "partitions": cfg.partitions}  # fmt: skip
        try:
            zone = Zone(**base).altered(changes)
        except ZoneError as err:
            raise ApiError(400, "bad-zone", str(err)) from None
        if zone.partitions > self.runtime.cfg.partitions:
            raise ApiError(400, "bad-zone", f"partitions must be at most the nodes' "
                           f"{self.runtime.cfg.partitions} groups (--partitions)")  # fmt: skip
        cond = {"key": config_key(ZONE), "target": "mod_revision", "value": rec["mod_revision"]}
        writes = [{"op": "put", "key": config_key(ZONE), "value": msgspec.to_builtins(zone)}]
        if rec["value"] is None:
            # Creation: each partition's stable assignment is its group as it is now.
            writes += [{"op": "put", "key": key(ZONE, p, "stable"),
                        "value": await current_peers(self.runtime, self.peers, p)}
                       for p in range(zone.partitions)]  # fmt: skip
        out = await self._meta("invoke", {"if": [cond], "then": writes})
        if not out["succeeded"]:
            raise ApiError(409, "conflict", "the zone changed meanwhile; retry")
        return _json({"zone": msgspec.to_builtins(zone), "revision": out["revision"]})

    async def show_zone(self, request: web.Request) -> web.Response:
        """The zone's definition and data nodes."""
        zone_id = request.match_info["id"]
        conf = await self._meta("get", {"key": config_key(zone_id)})
        if conf["value"] is None:
            raise ApiError(404, "unknown-zone", f"no zone {zone_id!r}")
        nodes = await self._meta("get", {"key": data_nodes_key(zone_id)})
        return _json({"zone": conf["value"], "data_nodes": nodes["value"],
                      "revision": nodes["revision"]})  # fmt: skip

    async def assignments(self, request: web.Request) -> web.Response:
        """Every assignment key: partition, kind, value, create/mod revision, version."""
        snap = await self._meta("range", {"prefix": "zone."})
        out = []
        for kv in snap["kvs"]:
            parsed = parse(kv["key"])
            if parsed is not None:
                out.append({**kv, "zone": parsed[0], "partition": parsed[1], "kind": parsed[2]})
        return _json({"revision": snap["revision"], "assignments": out})

    async def cancel_rebalance(self, request: web.Request) -> web.Response:
        """Write cancel = (stable, pending) for a partition, guarded on pending's revision."""
        body = await json_object(request)
        p = body.get("partition")
        if not isinstance(p, int) or isinstance(p, bool) or p < 0:
            raise ApiError(400, "bad-request", "partition must be a non-negative integer")
        pending = await self._meta("get", {"key": key(ZONE, p, "pending")})
        stable = await self._meta("get", {"key": key(ZONE, p, "stable")})
        if pending["value"] is None:
            raise ApiError(409, "no-rebalance", f"partition {p} has no pending rebalance")
        rev = body.get("pending_revision", pending["mod_revision"])
        guard = not self.runtime.failpoints.hit("rebalance.cancel-without-revision-guard")
        spec = cancel_invoke(ZONE, p, stable["value"] or [], pending["value"], rev, guard=guard)
        out = await self._meta("invoke", spec)
        return _json({"succeeded": out["succeeded"], "revision": out["revision"],
                      "pending_revision": rev})  # fmt: skip

    async def placement(self, request: web.Request) -> web.Response:
        """The driver lease, every primary lease, the zone's partition count, and
        this node's driver and primaries."""
        driver = await self._meta("get", {"key": DRIVER_KEY})
        leases = await self._meta("range", {"prefix": "placement.lease."})
        # A partition the zone dropped keeps its lapsed lease key: the count
        # tells a reader that lease from a primary that lapsed in the zone.
        zone = await self._meta("get", {"key": config_key(ZONE)})
        return _json({
            "driver": driver["value"],
            "leases": {kv["key"].rsplit(".", 2)[-1]: kv["value"] for kv in leases["kvs"]},
            "partitions": (zone["value"] or {}).get("partitions"),
            "revision": leases["revision"],
            "this_node": {**self.driver.status(), "primary_of": sorted(self.agent.leases),
                          "last_seen": self.agent.last_seen,
                          "replicas": self.replicas.status(),
                          "jobs": {k: {"kind": j.kind, "state": j.state, "new": j.new}
                                   for k, j in self.agent.jobs.items()}},
        })  # fmt: skip

    # -- internal ----------------------------------------------------------------

    async def grant(self, request: web.Request) -> web.Response:
        """The driver made this node a partition's primary."""
        b = await json_object(request)
        took = await self.agent.grant(b["zone"], int(b["partition"]), int(b["lease_revision"]),
                                      int(b["last_seen_revision"]))  # fmt: skip
        if not took:
            why = f"{self.runtime.id} could not take the lease of {b['partition']}"
            raise ApiError(409, "lease-not-taken", why)
        return _json({"ok": True})

    async def revoke(self, request: web.Request) -> web.Response:
        """The driver moves the partition's primary away: stop acting for it."""
        b = await json_object(request)
        await self.agent.revoke(b["zone"], int(b["partition"]))
        return _json({"ok": True})

    async def _request(self, kind: str, request: web.Request) -> web.Response:
        b = await json_object(request)
        if not self.agent.is_primary(b["zone"], int(b["partition"])):
            raise ApiError(
                409, "not-primary", f"{self.runtime.id} is not primary of {b['partition']}"
            )
        ignore = self.runtime.failpoints.hit("rebalance.ignore-last-seen") is not None
        return _json(self.agent.request(kind, b, ignore))

    async def rebalance_request(self, request: web.Request) -> web.Response:
        """RebalanceRequest from the placement driver."""
        return await self._request("rebalance", request)

    async def cancel_request(self, request: web.Request) -> web.Response:
        """CancelRebalanceRequest from the placement driver."""
        return await self._request("cancel", request)

    async def group_event(self, request: web.Request) -> web.Response:
        """rebalance-done / rebalance-error / leader-elected from a group leader."""
        return _json({"matched": self.agent.group_event(await json_object(request))})

    async def cancel_group(self, request: web.Request) -> web.Response:
        """The cancel table, run on the group's leader."""
        b = await json_object(request)
        if b.get("group") not in self.runtime.groups:
            raise ApiError(404, "unknown-group", f"no group {b.get('group')!r}")
        return _json(await cancel_group(self.runtime, b))


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(data), status=status, content_type="application/json"
    )


def _read_mark(path: Path) -> int:
    """The last reported revision; 0 when absent. A file this build did not
    write whole (an older build's torn write) is reported and ignored rather
    than stopping the node from starting."""
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return 0
    except ValueError:
        log.warning("%s is not a revision; reporting assignment writes from the start", path)
        return 0
