"""The replication group's side: events to the primary, and the cancel table.

On this node, for each KV group it leads, the Raft core's `change-done`,
`change-error` and `role: leader` events become rebalance-done,
rebalance-error and leader-elected messages to the partition's primary
replica (found through its lease key in the metastore). A send that fails
is retried until it lands or this node is no longer the group's leader in
the same term: then the new leader sends its own leader-elected, which
makes the primary resend its request (seed 004, 3.1). Retries back off from
RETRY_S to RETRY_MAX_S: a primary with a job polls the leader itself every
EVENT_WAIT_S when no event comes, so the message only saves it time, and a
partition nobody holds (outside the zone, or between leases) would
otherwise cost a linearizable metastore read every RETRY_S for as long as
this node leads it (467 of a 60 s simulated run's 563 listener reads).

`cancel_group` answers a primary's CancelRebalance on the group's leader
with the outcome of ember.rebalance.cancel's table, aborting a change that
is still catching up by handing leadership to another old voter (the core
resets a change when its leader steps down; the group stays at old).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from ember.metastore.client import MetaClient, MetaUnavailable
from ember.raft.facade import change_target
from ember.rebalance.cancel import Outcome, cancel_outcome
from ember.runtime import Group, NodeRuntime

if TYPE_CHECKING:  # ember.placement imports this module: importing it here made a cycle
    from ember.placement.peers import Peers

log = logging.getLogger(__name__)
RETRY_S = 0.5
RETRY_MAX_S = 3.0  # agent.EVENT_WAIT_S: beyond it the primary has polled the leader itself
ZONE = "default"


def lease_key(zone: str, partition: int) -> str:
    """The metastore key of a partition's primary-replica lease."""
    return f"placement.lease.{zone}.{partition}"


class GroupListener:
    """Forwards this node's group-leader events to the primaries."""

    def __init__(self, runtime: NodeRuntime, meta: MetaClient, peers: Peers) -> None:
        self.runtime = runtime
        self.meta = meta
        self.peers = peers
        self._tasks: dict[asyncio.Task[None], None] = {}  # ordered, unlike a set of tasks
        runtime.event_listeners.append(self.on_event)

    def on_event(self, group: str, event: dict[str, Any]) -> None:
        """Runtime hook: pick the events the primary must hear about."""
        if not group.startswith("part-"):
            return
        kind = event.get("kind")
        if kind == "change-done":
            msg = {
                "kind": "rebalance-done",
                "peers": event.get("peers"),
                "token": event.get("token"),
            }
        elif kind == "change-error":
            msg = {"kind": "rebalance-error", "status": event.get("status"),
                   "reason": event.get("reason"), "token": event.get("token")}  # fmt: skip
        elif kind == "role" and event.get("role") == "leader":
            msg = {"kind": "leader-elected"}
        else:
            return
        msg.update(group=group, leader=self.runtime.id, term=event.get("term"))
        task = asyncio.get_running_loop().create_task(self._send(group, msg))
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    def _still_leader(self, group: str, term: Any) -> bool:
        # A send outlives its group here when a rebalance moves the replica off
        # this node: the node no longer leads it, and the send ends.
        replica = self.runtime.groups.get(group)
        if replica is None:
            return False
        raw = replica.raw
        return raw.leader == self.runtime.id and (term is None or raw.term == term)

    async def _send(self, group: str, msg: dict[str, Any]) -> None:
        partition = int(group.split("-", 1)[1])
        delay = RETRY_S
        while self._still_leader(group, msg.get("term")):
            try:
                lease = (await self.meta.get(lease_key(ZONE, partition)))["value"]
            except MetaUnavailable:
                lease = None
            if isinstance(lease, dict) and lease.get("holder"):
                code, _ = await self.peers.call(lease["holder"], "POST", "/internal/group-event",
                                                msg)  # fmt: skip
                if code == 200:
                    return
            await asyncio.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_S)

    async def stop(self) -> None:
        """Cancel pending sends."""
        for task in list(self._tasks):
            task.cancel()


async def cancel_group(runtime: NodeRuntime, body: dict[str, Any]) -> dict[str, Any]:
    """The cancel table's outcome on this group leader (see the module doc).

    Answers {"outcome": ..., "peers": in force}; "not-leader" when this node
    does not lead the group.
    """
    group = runtime.groups[body["group"]]
    old, new = sorted(body["old"]), sorted(body["new"])
    for _ in range(100):
        raw = group.raw
        if raw.leader != runtime.id:
            return {"outcome": "not-leader", "leader": raw.leader}
        st = raw.status()
        conf = change_target(raw)
        target = sorted(conf.peers) if conf is not None else None
        outcome: Outcome = cancel_outcome(st.stage, target, list(st.conf.peers), old, new)
        if outcome in ("noop", "cancelled", "cannot-cancel", "mismatch") and st.stage == "none":
            return {"outcome": outcome, "peers": list(st.conf.peers)}
        if outcome == "cancelled":
            others = [p for p in old if p != runtime.id]
            if not others:
                return {"outcome": "mismatch", "peers": list(st.conf.peers)}
            to = others[0]

            def hand_over(g: Group, to: str = to) -> None:
                g.raw.transfer_leader(to)

            await runtime.call(group.id, hand_over)
            # The primary asks the next leader, which finds the group idle at old.
            return {"outcome": "aborting", "leader": others[0]}
        await asyncio.sleep(0.2)
    return {"outcome": "wait", "peers": list(group.raw.status().conf.peers)}
