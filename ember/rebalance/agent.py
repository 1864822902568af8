"""The primary replica's side of the rebalance protocol (seed 004, steps 2-4).

Theory of operation
-------------------
The placement driver grants a node the primary-replica lease of a partition
(`grant`, with `last_seen_revision` = current revision - 1) and then sends
it RebalanceRequest / CancelRebalanceRequest, each carrying the revision of
the metastore read that triggered it. The primary persists the highest
revision it has seen per partition (`primary.json` in the data dir,
fsynced) and ignores any request older than that: a deposed driver's
requests cannot undo a newer decision. Every request is idempotent: a
request for the job already running answers "running", and a finished
rebalance's repeat finds the group already there and answers done.

A rebalance job: await-replica (every new peer answers and hosts the
group), changePeers to the group's Raft leader with token = the pending
key's revision, then wait for the leader's rebalance-done / rebalance-error
/ leader-elected event (or poll the leader when none comes). Before each
changePeers the job reads pending afresh and stops if it is no longer the
write it serves: a primary replaced while cut off is never told. Done: the one
atomic done invoke (ember.rebalance.invokes). An error with a status (the
change failed, e.g. ECATCHUP) is unrecoverable for this attempt: the
primary writes cancel = (old, new) naming the pending revision, and the
driver then sends the cancel. A cancel job asks the group's leader for the
outcome of the cancel table (ember.rebalance.cancel). `cancelled` and
`noop` (the group is at old) it finishes itself with the done invoke over
old. `cannot-cancel` (the group already committed new) it leaves to the
placement driver, as seed 004 says: the job stops there and the answer to
the driver's (periodically repeated) CancelRebalance carries the outcome;
the driver logs it and runs the usual done invoke over new. Every answer
about a job names its `state` and, once known, its `outcome`.

The lease (INVARIANTS M9: at most one primary per partition acts at any
instant of real time, whatever the clocks say). The driver names the holder
in the lease key; the holder then keeps the lease itself, renewing the key
every `RENEW_EVERY_S` with a write guarded on the key's mod revision as it
last wrote or was granted it. It acts only until `PRIMARY_LEASE_S` minus a
margin after it sent the renewal that last succeeded (its monotonic clock),
checks so before every action (`_acting`, audited `primary-acting` with the
lease revision) and, once that time passes or a renewal finds the key
rewritten, stops every job (`primary-lease-lost`). The driver moves a lease
away from a holder it cannot reach only after seeing the same record,
unchanged, for the lease plus the margin by its own clock: by then the
holder has stopped. A revoke (a reachable holder) stops it at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ember import clock
from ember.metastore.client import MetaClient, MetaRefused, MetaUnavailable
from ember.placement.peers import Peers
from ember.rebalance.invokes import cancel_invoke, done_invoke, put_if_unchanged
from ember.rebalance.keys import assignments_prefix, key
from ember.rebalance.lease import LEASE_MARGIN, PRIMARY_LEASE_S, RENEW_EVERY_S
from ember.rebalance.listener import lease_key
from ember.runtime import NodeRuntime
from ember.smallfile import replace_text
from ember.waiting import wait_set

log = logging.getLogger(__name__)
EVENT_WAIT_S = 3.0
AWAIT_REPLICA_S = 5.0


class LeaseLostError(Exception):
    """The primary lease ran out or was taken over: stop acting."""


@dataclass
class Lease:
    """A primary lease this node holds."""

    revision: int  # the lease key's mod revision as this node last wrote or was granted it
    valid_until: float  # monotonic: act only before this


@dataclass
class Job:
    """One rebalance or cancel a primary is carrying out."""

    kind: str  # "rebalance" | "cancel"
    zone: str
    partition: int
    pending_revision: int
    old: list[str]
    new: list[str]
    request_revision: int
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    events: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    state: str = "running"
    outcome: str | None = None  # a cancel job's outcome once the group answered


class PrimaryAgent:
    """The primary-replica role for every partition whose lease this node holds."""

    def __init__(self, runtime: NodeRuntime, meta: MetaClient, peers: Peers) -> None:
        self.runtime = runtime
        self.meta = meta
        self.peers = peers
        self.path = runtime.cfg.data_dir / "primary.json"
        self.last_seen: dict[str, int] = self._load()
        self.leases: dict[str, Lease] = {}  # "zone/p" -> the lease held
        self.jobs: dict[str, Job] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._last_lease: dict[str, int] = {}  # "zone/p" -> the newest lease revision acted under

    # -- persistence -----------------------------------------------------------

    def _load(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in json.loads(self.path.read_text()).items()}
        except FileNotFoundError:
            return {}

    def _persist(self) -> None:
        replace_text(self.path, json.dumps(self.last_seen), durable=True)

    def _audit(self, kind: str, **fields: Any) -> None:
        self.runtime.audit.record({"kind": kind, **fields}, f"part-{fields.get('partition')}")

    # -- the lease -------------------------------------------------------------

    async def grant(self, zone: str, partition: int, lease_revision: int, last_seen: int) -> bool:
        """Become primary: take the lease key the driver wrote at `lease_revision`
        (a renewal guarded on it; none if this node already renewed past it);
        last seen starts at the driver's current revision - 1. False if the
        key was rewritten meanwhile, or the metastore did not answer."""
        name = f"{zone}/{partition}"
        held = self.leases.get(name)
        if held is None or held.revision < lease_revision:
            outcome = await self._renew(zone, partition, lease_revision, held)
        elif time.monotonic() >= held.valid_until:
            outcome = await self._renew(zone, partition, held.revision, held)
        else:
            outcome = "renewed"  # held already, past the driver's write
        if outcome != "renewed":
            return False
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.get_running_loop().create_task(self._keep_leases())
        self._drop_older_jobs(zone, partition, last_seen)
        return True

    def _drop_older_jobs(self, zone: str, partition: int, last_seen: int) -> None:
        name = f"{zone}/{partition}"
        # Never backwards: this node may have seen newer requests before.
        self.last_seen[name] = max(self.last_seen.get(name, 0), last_seen)
        self._persist()
        job = self.jobs.get(name)
        if job is not None and job.request_revision < self.last_seen[name]:
            # A job started by a request from before this grant may be a deposed
            # driver's: drop it rather than finish it under the new last seen.
            # The granting driver resends the request at its current revision,
            # and the job starts again (requests are idempotent). The soak's
            # seed 105 finished such a job and reported it applied below last seen.
            del self.jobs[name]
            if job.task is not None:
                job.task.cancel()
            self._audit("rebalance-request" if job.kind == "rebalance" else "cancel-request",
                        direction="dropped", zone=zone, partition=partition,
                        request_revision=job.request_revision,
                        last_seen_revision=self.last_seen[name], peers=job.new)  # fmt: skip

    async def revoke(self, zone: str, partition: int) -> None:
        """Hand the lease over: stop acting for the partition (graceful transfer)."""
        name = f"{zone}/{partition}"
        self.leases.pop(name, None)
        job = self._stop_job(name)
        if job is not None and job.task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job.task

    def _stop_job(self, name: str) -> Job | None:
        """Forget the partition's job and cancel its task; the job, if any."""
        job = self.jobs.pop(name, None)
        if job is not None and job.task is not None:
            job.task.cancel()
        return job

    async def stop(self) -> None:
        """Stop renewing (the node is stopping; its jobs are revoked one by one)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None

    def is_primary(self, zone: str, partition: int) -> bool:
        """Whether this node holds the partition's primary lease, still valid."""
        held = self.leases.get(f"{zone}/{partition}")
        return held is not None and time.monotonic() < held.valid_until

    async def _renew(self, zone: str, partition: int, revision: int, current: Lease | None) -> str:
        """Write the lease key again, guarded on `revision`: "renewed", "lost"
        (the key was rewritten: another holder, a release) or "unavailable".
        The lease counts from before the write was sent, and replaces `current`
        only if nothing replaced or revoked that meanwhile."""
        name = f"{zone}/{partition}"
        sent = time.monotonic()
        value = {"holder": self.runtime.id, "expires": clock.wall() + PRIMARY_LEASE_S}
        try:
            out = await self.meta.invoke(put_if_unchanged(lease_key(zone, partition), revision,
                                                          value))  # fmt: skip
        except (MetaUnavailable, MetaRefused):
            return "unavailable"
        if not out.get("succeeded"):
            return "lost"
        if self.leases.get(name) is not current:
            return "lost"  # revoked, or granted again, while this write was in flight
        self.leases[name] = Lease(int(out["revision"]), sent + PRIMARY_LEASE_S * (1 - LEASE_MARGIN))
        return "renewed"

    async def _keep_leases(self) -> None:
        """Renew every held lease each RENEW_EVERY_S; stop acting for one that ran
        out or was taken over."""
        while self.leases:
            await asyncio.sleep(RENEW_EVERY_S)
            for name, held in list(self.leases.items()):
                zone, part = name.rsplit("/", 1)
                outcome = await self._renew(zone, int(part), held.revision, held)
                if outcome == "renewed" or self.leases.get(name) is not held:
                    continue  # renewed, or revoked or granted again meanwhile
                if outcome == "lost":
                    self._lapse(name, "taken over")
                elif outcome == "unavailable" and time.monotonic() >= held.valid_until:
                    self._lapse(name, "expired")

    def _lapse(self, name: str, reason: str) -> None:
        """The lease is gone: stop every job of the partition at once."""
        held = self.leases.pop(name, None)
        if not self._ignores_lease():
            self._stop_job(name)
        zone, part = name.rsplit("/", 1)
        self._audit("primary-lease-lost", zone=zone, partition=int(part), reason=reason,
                    revision=held.revision if held is not None else None)  # fmt: skip
        log.info("primary lease of %s %s: stopped acting", name, reason)

    def _holds_lease(self, job: Job, act: str) -> None:
        """Raise LeaseLostError when the job's primary lease may have run out."""
        name = f"{job.zone}/{job.partition}"
        held = self.leases.get(name)
        if held is not None:
            self._last_lease[name] = held.revision
        if (held is None or time.monotonic() >= held.valid_until) and not self._ignores_lease():
            raise LeaseLostError(f"primary lease of {name} ran out before {act}")

    def _acting(self, job: Job, act: str) -> None:
        """Audit, before it happens, an action under the primary lease (M9); raise
        LeaseLostError when the lease may have run out."""
        self._holds_lease(job, act)
        name = f"{job.zone}/{job.partition}"
        self._audit("primary-acting", zone=job.zone, partition=job.partition, act=act,
                    primary_lease=self._last_lease.get(name, 0))  # fmt: skip

    def _ignores_lease(self) -> bool:
        fp = self.runtime.failpoints
        return fp.any_enabled and fp.hit("rebalance.primary-ignores-lease") is not None

    # -- requests --------------------------------------------------------------

    def request(self, kind: str, body: dict[str, Any], ignore_last_seen: bool) -> dict[str, Any]:
        """Handle a Rebalance/CancelRebalance request; the answer to the driver."""
        zone, partition, rev = body["zone"], int(body["partition"]), int(body["revision"])
        name = f"{zone}/{partition}"
        event = "rebalance-request" if kind == "rebalance" else "cancel-request"
        seen = self.last_seen.get(name, 0)
        fields = {"request_revision": rev, "last_seen_revision": seen, "partition": partition,
                  "zone": zone, "peers": body["new"]}  # fmt: skip
        if rev < seen and not ignore_last_seen:
            self._audit(event, direction="ignored", **fields)
            return {"state": "ignored", "last_seen_revision": seen}
        self.last_seen[name] = max(seen, rev)
        self._persist()
        self._audit(event, direction="received", **fields)
        job = self.jobs.get(name)
        pending_rev = int(body["pending_revision"])
        finished = job is not None and job.state in ("done", "already-done", "failed",
                                                     "superseded", "lease-lost")  # fmt: skip
        if job is not None and (job.kind, job.pending_revision) == (kind, pending_rev) \
                and not finished:  # fmt: skip
            # The same rebalance asked again: the running job now answers this request
            # (a finished one is run again: the driver asks only while pending is that
            # write, and the repeat finds the group there and the keys maybe done).
            job.request_revision = max(job.request_revision, rev)
            return _answer(job)
        if job is not None and job.task is not None:
            job.task.cancel()  # superseded by a newer pending, or by its cancel
        job = Job(kind, zone, partition, pending_rev, list(body["old"]), list(body["new"]), rev)
        self.jobs[name] = job
        runner = self._rebalance if kind == "rebalance" else self._cancel
        job.task = asyncio.get_running_loop().create_task(self._guard(job, runner))
        return {"state": "started"}

    def group_event(self, body: dict[str, Any]) -> bool:
        """A group leader's rebalance-done / rebalance-error / leader-elected event."""
        group = str(body.get("group", ""))
        for job in self.jobs.values():
            if f"part-{job.partition}" == group:
                job.events.append(body)
                job.wake.set()
                return True
        return False

    async def _guard(self, job: Job, runner: Any) -> None:
        try:
            await runner(job)
        except asyncio.CancelledError:
            raise
        except LeaseLostError as err:
            log.info("%s job for %s/%s stopped: %s", job.kind, job.zone, job.partition, err)
            job.state = "lease-lost"
        except Exception:
            log.exception("%s job for %s/%s failed", job.kind, job.zone, job.partition)
            job.state = "failed"

    # -- jobs ------------------------------------------------------------------

    async def _await_replicas(self, job: Job) -> bool:
        """Whether every replica being added answers; False when one stays down
        past AWAIT_REPLICA_S while a planned assignment waits (give way to it)."""
        group = f"part-{job.partition}"
        # Only the replicas being added: a current voter that is down must not
        # block a change whose majorities do not need it.
        adding = sorted(set(job.new) - set(job.old))
        deadline = asyncio.get_running_loop().time() + AWAIT_REPLICA_S
        while True:
            ready = await asyncio.gather(*(self._hosts(n, group) for n in adding))
            if all(ready):
                return True
            if asyncio.get_running_loop().time() > deadline:
                planned = await self._read(job, self.meta.get, key(job.zone, job.partition,
                                                                   "planned"))  # fmt: skip
                if planned["value"]:
                    return False
            await asyncio.sleep(0.3)

    async def _hosts(self, node: str, group: str) -> bool:
        if node == self.runtime.id:
            return group in self.runtime.groups
        status, doc = await self.peers.call(node, "GET", "/admin/status", timeout_s=1.5)
        return status == 200 and group in doc.get("groups", {})

    async def _leader_status(self, group: str) -> tuple[str | None, dict[str, Any] | None]:
        # Never this replica's own idea of the leader alone: the primary's replica
        # may have been removed with the old leader and then hears from no one.
        return await self.peers.leader_status(group)

    async def _rebalance(self, job: Job) -> None:
        if not await self._await_replicas(job):
            # A new replica is gone and a newer assignment waits: this change
            # cannot finish, so it is cancelled (unrecoverable), making way.
            await self._auto_cancel(job, {"reason": "a new replica did not start"})
            return
        group, target = f"part-{job.partition}", sorted(job.new)
        body = {"group": group, "peers": target, "learners": [], "token": job.pending_revision}
        while True:
            leader, st = await self._leader_status(group)
            if st is not None and sorted(st["conf"]["peers"]) == target and not st["conf"]["joint"]:
                if st["stage"] == "none":
                    break  # done (also a repeat of a finished rebalance)
            elif leader is not None and st is not None and st["stage"] == "none":
                serves = await self._serves_pending(job)
                if serves is False:
                    self._drop_superseded(job)
                    return
                if serves:
                    self._acting(job, "change-peers")
                    code, answer = await self.peers.call(
                        leader, "POST", "/admin/change-peers/submit", body
                    )
                    if code not in (202, 409, 421):
                        log.info("change-peers on %s for %s: %s %s", leader, group, code, answer)
            await self._wait_event(job)
            failed = [e for e in job.events if _failed(e, job.pending_revision)]
            if failed:
                await self._auto_cancel(job, failed[-1])
                return
            job.events.clear()
        await self._finish(job, target)

    async def _serves_pending(self, job: Job) -> bool | None:
        """Whether pending is still the write this job serves, read fresh before
        each change the job starts (None: the metastore did not answer).

        A primary the driver replaced without a revoke (it was cut off from
        the driver then) is told nothing, and its job re-submitted a
        rebalance that had since been cancelled and replaced: the group moved
        to peers no assignment named any more, and the cancel of the next
        pending could never resolve (sim seed 7125 of the cancel-race mix).
        The raft token does not fence it: the revert to old wrote no
        configuration, so the token in force stayed below the stale one."""
        try:
            rec = await self.meta.get(key(job.zone, job.partition, "pending"))
        except MetaUnavailable:
            return None
        return rec.get("mod_revision") == job.pending_revision

    def _drop_superseded(self, job: Job) -> None:
        job.state = "superseded"
        self._audit("rebalance-request", direction="dropped", zone=job.zone,
                    partition=job.partition, request_revision=job.request_revision,
                    last_seen_revision=self.last_seen.get(f"{job.zone}/{job.partition}", 0),
                    peers=job.new, reason="pending replaced")  # fmt: skip

    async def _wait_event(self, job: Job) -> None:
        await wait_set(job.wake, EVENT_WAIT_S)
        job.wake.clear()

    async def _auto_cancel(self, job: Job, err: dict[str, Any]) -> None:
        log.warning("rebalance of %s/%s failed (%s): cancelling", job.zone, job.partition, err)
        spec = cancel_invoke(job.zone, job.partition, job.old, job.new, job.pending_revision)
        await self._invoke(job, "write-cancel", spec)
        job.state = "cancel-written"

    async def _cancel(self, job: Job) -> None:
        group = f"part-{job.partition}"
        body = {"group": group, "old": job.old, "new": job.new}
        aborted = False  # a leader aborted the change in flight: idle at old is then a revert
        while True:
            leader, _ = await self._leader_status(group)
            if leader is not None:
                self._acting(job, "cancel-group")
                code, answer = await self.peers.call(leader, "POST", "/internal/cancel-group",
                                                     body, timeout_s=15.0)  # fmt: skip
                outcome = answer.get("outcome") if code == 200 else None
                aborted = aborted or outcome == "aborting"
                if outcome == "noop" and aborted:
                    outcome = "cancelled"
                if outcome in ("cancelled", "noop", "cannot-cancel"):
                    break
                if outcome == "mismatch":
                    log.error("cancel of %s: group matches neither side: %s", group, answer)
            await self._wait_event(job)
        seen = self.last_seen.get(f"{job.zone}/{job.partition}", 0)
        self._audit("cancel-request", direction="applied", outcome=outcome, zone=job.zone,
                    partition=job.partition, request_revision=job.request_revision,
                    last_seen_revision=seen, peers=job.new,
                    pending_revision=job.pending_revision)  # fmt: skip
        job.outcome = outcome
        if outcome == "cannot-cancel":
            # The placement driver finishes it (it hears the outcome in its
            # next CancelRebalance's answer): this primary writes nothing.
            job.state = "cannot-cancel"
            return
        await self._finish(job, job.old)

    async def _finish(self, job: Job, peers: list[str]) -> None:
        pending = key(job.zone, job.partition, "pending")
        while True:
            snap = await self._read(job, self.meta.range,
                                    assignments_prefix(job.zone, job.partition))  # fmt: skip
            kvs = {kv["key"]: kv for kv in snap["kvs"]}
            spec = done_invoke(kvs, job.zone, job.partition, peers, job.pending_revision)
            result = await self._invoke(job, "write-done", spec)
            rec = await self._read(job, self.meta.get, pending) if not result.get("succeeded") \
                else None  # fmt: skip
            # The guard also holds planned as read: a trigger writing planned in
            # between fails it while pending is still ours. Read again and retry.
            if rec is None or rec["mod_revision"] != job.pending_revision:
                break
        seen = self.last_seen.get(f"{job.zone}/{job.partition}", 0)
        if job.kind == "rebalance":
            self._audit("rebalance-request", direction="applied", zone=job.zone,
                        partition=job.partition, request_revision=job.request_revision,
                        last_seen_revision=seen, peers=peers)  # fmt: skip
        job.state = "done" if result.get("succeeded") else "already-done"

    async def _read(self, job: Job, read: Callable[[str], Awaitable[dict[str, Any]]],
                    path: str) -> dict[str, Any]:  # fmt: skip
        """A read the job needs, retried while the metastore does not answer (a
        partition is a fault the agent is built to ride out, not an error), for
        as long as the job's primary lease lasts (LeaseLostError after)."""
        while True:
            try:
                return await read(path)
            except MetaUnavailable as err:
                log.info("metastore unavailable, retrying a read: %s", err)
            await asyncio.sleep(0.5)
            self._holds_lease(job, f"reading {path}")

    async def _invoke(self, job: Job, act: str, spec: dict[str, Any]) -> dict[str, Any]:
        while True:
            self._acting(job, act)  # each retry is an action of its own
            try:
                return await self.meta.invoke(spec)
            except MetaUnavailable as err:
                log.info("metastore unavailable, retrying: %s", err)
            except MetaRefused:
                raise
            await asyncio.sleep(0.5)


def _answer(job: Job) -> dict[str, Any]:
    """What a repeat of a job's request is told: its state and the outcome once known."""
    answer: dict[str, Any] = {"state": job.state}
    if job.outcome is not None:
        answer["outcome"] = job.outcome
    return answer


def _failed(event: dict[str, Any], token: int) -> bool:
    # A step-down reset has status null: the next leader's leader-elected
    # makes us resend. A status means the change itself failed (ECATCHUP...).
    return bool(
        event.get("kind") == "rebalance-error"
        and event.get("status")
        and event.get("token") == token
    )
