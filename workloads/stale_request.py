"""Stale Rebalance requests, as a deposed placement driver would send them.

A primary replica must ignore any request stamped below the highest
revision it has seen for the partition (seed 004): otherwise a placement
driver that lost its lease, and still acts on what it read back then, can
undo a newer decision. In a run that only happens when a driver is deposed
mid-send, so the planted defect `rebalance.ignore-last-seen` would show
only by luck. The rebalance workload therefore sends a few such requests
itself, seeded and bounded.

Schedule (`StaleRequests`, pure): one op every `gap_s` on average (0.5 to
1.5 times it, seeded), at most `limit` per run, none at or after `stop_ns`.
Each op's value names the zone partitions in a seeded order.

Execution (`send_stale`): for the first partition of that order that has
one, rebuild the Rebalance request of its latest rebalance from the
metastore's history, as the driver sent it right after the trigger wrote
pending:

- pending present: the request for it (pending, stable as now);
- pending absent: the keys just before stable's last write (a range at
  stable's mod revision - 1); if pending was set then, that finished
  rebalance's request (a partition whose stable dates from the zone's
  creation has none);
- `revision` (and `pending_revision`) = pending's mod revision: the
  earliest revision any driver could have read that pending at.

It is sent to the partition's current primary (GET /admin/placement's
leases) at POST /internal/rebalance only when that revision is below the
primary's `last_seen` for the partition (its own /admin/placement), so a
clean primary must answer `ignored`. History op f `STALE_F`; value
{stale: true, partitions}; completion value {partition, primary, request,
last_seen, outcome: "ignored" | "acted", answer}:

- ok: the primary answered (outcome `acted` on anything but ignored);
- fail: certainly not acted on: no partition had a stale request to send,
  or the primary refused it (no longer primary, a bad request, or the
  connection never opened);
- info: sent and no answer (a timeout): it may have been acted on.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from ember.client import EmberClient
from ember.rebalance.keys import assignments_prefix, key
from harness.interpreter import Reply
from workloads.generator import Op

ZONE = "default"
# The f the checkers already treat as a control-plane request, never as a
# client op on the model (checkers.stats.MEMBERSHIP_FS): a new f would be
# fed to the linearizability check. `stale: true` in the value tells it apart.
STALE_F = "stale-request"
GAP_S = 12.0
LIMIT = 20


class StaleRequests:
    """When to send a stale request and which partitions to try (module doc)."""

    def __init__(
        self, rng: random.Random, *, stop_ns: int, gap_s: float = GAP_S, limit: int = LIMIT
    ) -> None:
        self.rng, self.stop_ns, self.limit = rng, stop_ns, limit
        self.gap_ns = int(gap_s * 1e9)
        self.sent = 0
        self.next_ns: int | None = None

    def due(self, now_ns: int) -> int | None:
        """The time of the next stale request; None when none is left."""
        if self.next_ns is None:
            self.next_ns = now_ns + self._gap()
        if self.sent >= self.limit or self.next_ns >= self.stop_ns:
            return None
        return self.next_ns

    def take(self, now_ns: int, partitions: int) -> Op:
        """The op due now (call only when `due` gave a time)."""
        at = max(self.due(now_ns) or now_ns, now_ns)
        order = list(range(max(partitions, 1)))
        self.rng.shuffle(order)
        self.sent += 1
        self.next_ns = at + self._gap()
        return Op(f=STALE_F, value={"stale": True, "partitions": order}, time_ns=at)

    def _gap(self) -> int:
        return int((0.5 + self.rng.random()) * self.gap_ns)


def is_stale_op(op: Op) -> bool:
    """Whether `op` is one of this module's stale requests."""
    return op.f == STALE_F and isinstance(op.value, dict) and op.value.get("stale") is True


def rebuild(
    now: Mapping[str, dict[str, Any]], before: Mapping[str, dict[str, Any]] | None, p: int
) -> dict[str, Any] | None:
    """The request of partition `p`'s latest rebalance from its keys `now` and,
    when pending is gone, `before` (the keys at stable's mod revision - 1)."""
    pending, stable = key(ZONE, p, "pending"), key(ZONE, p, "stable")
    snap = now if pending in now else before
    if snap is None or pending not in snap or stable not in snap:
        return None
    rev = int(snap[pending]["mod_revision"])
    return {"zone": ZONE, "partition": p, "pending_revision": rev, "revision": rev,
            "old": snap[stable]["value"], "new": snap[pending]["value"]}  # fmt: skip


class _Sender:
    def __init__(self, client: EmberClient, node_of: Mapping[str, str]) -> None:
        self.client, self.node_of = client, node_of
        self.url_of = {n: u for u, n in node_of.items()}

    async def _call(self, method: str, path: str, body: Any = None, base: str | None = None) -> Any:
        out = await self.client.request(method, path, body, base=base)
        if not out.ok:
            self.client.move_on()  # another node next time
        return out.value if out.ok and isinstance(out.value, dict) else None

    async def _keys(self, p: int, revision: int | None) -> dict[str, dict[str, Any]] | None:
        body: dict[str, Any] = {"prefix": assignments_prefix(ZONE, p)}
        if revision is not None:
            body["revision"] = revision
        doc = await self._call("POST", "/meta/range", body)
        return None if doc is None else {kv["key"]: kv for kv in doc.get("kvs", [])}

    async def candidate(self, p: int) -> tuple[str, int, dict[str, Any]] | None:
        """(primary, its last seen, the stale request) for `p`, or None."""
        placement = await self._call("GET", "/admin/placement")
        lease = ((placement or {}).get("leases") or {}).get(str(p))
        holder = lease.get("holder") if isinstance(lease, dict) else None
        if holder not in self.url_of:
            return None
        mine = await self._call("GET", "/admin/placement", base=self.url_of[holder])
        last = ((mine or {}).get("this_node") or {}).get("last_seen", {}).get(f"{ZONE}/{p}")
        now = await self._keys(p, None)
        if not isinstance(last, int) or now is None:
            return None
        before = None
        stable = now.get(key(ZONE, p, "stable"))
        if key(ZONE, p, "pending") not in now and stable is not None:
            before = await self._keys(p, int(stable["mod_revision"]) - 1)
        request = rebuild(now, before, p)
        if request is None or request["revision"] >= last:
            return None  # nothing to resend, or not older than what the primary saw
        return str(holder), last, request


async def send_stale(
    client: EmberClient, node_of: Mapping[str, str], partitions: Sequence[int]
) -> Reply:
    """Send one stale request (module doc) to the first partition that has one."""
    sender = _Sender(client, node_of)
    for p in partitions:
        found = await sender.candidate(p)
        if found is None:
            continue
        holder, last, request = found
        out = await client.request("POST", "/internal/rebalance", request,
                                   base=sender.url_of[holder])  # fmt: skip
        value: dict[str, Any] = {"stale": True, "partition": p, "primary": holder,
                                 "request": request, "last_seen": last}  # fmt: skip
        if out.type == "unknown":
            return Reply(type="info", value=value, error=out.error, node=holder)
        if not out.ok or not isinstance(out.value, dict):
            return Reply(type="fail", value={**value, "outcome": "refused"}, error=out.error,
                         node=holder)  # fmt: skip
        ignored = out.value.get("state") == "ignored"
        value.update(outcome="ignored" if ignored else "acted", answer=out.value)
        return Reply(type="ok", value=value, node=holder)
    return Reply(
        type="fail",
        value={"stale": True, "outcome": "none"},
        error="no partition had a rebalance request older than its primary's last seen",
    )
