"""The nemesis worker: turns the schedule's abstract fault ops into real faults.

Theory of operation. `nemesis.generator.NemesisSchedule` says *what* to do
(kind, grouping or target, a seed, the trigger); this worker resolves it
against the live cluster (which node leads the trigger's group, which peer
is joining, who holds the placement-driver or a primary lease: see
`nemesis.targets`), applies it with the primitives (`nemesis.partition`,
`nemesis.slow`, the DB's process faults), and completes the history op with
the concrete targets and the exact commands (`Fault.as_value()`). Heal ops
undo the active fault of their kind. Every blocking SSH call runs in a
worker thread, so clients keep going meanwhile. `heal-all` (the runner's
last nemesis op) removes every fault whoever made it and restarts and
resumes every node. `active` (kind -> Fault) is what the progress display
shows and what the runner heals on error and on Ctrl-C.

Every applied fault's completion says which node it hit (`node`), how it
was found (`resolved`), and when it was applied (`applied_wall`, Unix
seconds); a phase-triggered one also its `reaction_ms` (the trigger
event's `wall` to applied). A role nobody holds completes `info` with
`unresolved` naming why, and nothing is applied (nor healed); so does a
kill or pause of a node whose process is not running. Kills and
pauses of a pidfile daemon go through `nemesis.process.kill_now` /
`pause_now` on a persistent shell (`nemesis.shell`): one SSH round trip on
an open channel, so a fault lands inside short windows.

Slow catch-up uses netem on the links toward the joining peer; where the
kernel has no netem, ember's `raft.append.delay` failpoint on every other
node instead, and where the db has no failpoints either (etcd:
`has_failpoints` false) an HTB rate limit of `SLOW_RATE_KBIT` on those
links. The completion's `method` says which it used.

`compact-kill` is a kill sent a few milliseconds after a compaction or
defragmentation request (`nemesis.maintenance`); its completion adds the
request's `maintenance` record (action, revision, how long after it the
kill landed, whether it was answered). It heals as a kill.

`drop-replies` switches ember's `http.drop-reply` failpoint on at its
target with the drawn `probability` (the node serves client requests and
closes the connection instead of a share of its success answers) and off
at its heal; heal-all switches every failpoint a fault asked for off on
every node, whatever came of the asking.

Every fault op's completion says whether it was applied: `ok` with
`applied: true`, or `info` with `applied: false` and the `reason`
(`applied` / `not_applied`); the run's fault counts
(`checkers.stats.fault_counts`) are read from these.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from harness.backends.base import NodeHandle
from harness.control import Control, ControlError
from harness.db import DB
from harness.interpreter import Reply
from harness.nodehttp import http_json
from harness.process_db import DBError, ProcessDB
from nemesis import maintenance, process
from nemesis import partition as part
from nemesis.clock import clock_fault
from nemesis.fault import Fault
from nemesis.generator import HEAL_OF
from nemesis.heal import heal_all
from nemesis.shell import Shell
from nemesis.slow import NetemUnavailableError, slow
from nemesis.targets import RANDOM_NODE, ROLE_TARGETS, Resolver, UnresolvedError
from workloads.generator import Op

SLOW_DELAY_MS = 300.0
SLOW_JITTER_MS = 50.0
SLOW_RATE_KBIT = 128  # where neither netem nor failpoints exist: a throttled link
SLOW_FAILPOINT = "raft.append.delay"
# heal-all asks a node that did not confirm a failpoint off again, this long.
FAILPOINT_SWEEP_S = 15.0
FAILPOINT_SWEEP_POLL_S = 0.5
# A failpoint fault on a node this worker restarted waits this long after the
# restart for the node to answer (ember listens about half a second after start).
RESTART_LISTEN_S = 5.0
RESTART_POLL_S = 0.1
DROP_FAILPOINT = "http.drop-reply"
HEALS = frozenset(HEAL_OF.values())


def applied(op: Op, value: dict[str, Any]) -> Reply:
    """The `ok` completion of an op; a fault op's says `applied: true`."""
    return Reply(type="ok", value={**value, "applied": True} if op.f in HEAL_OF else value)


def not_applied(op: Op, why: str, *, unresolved: bool = False) -> Reply:
    """The `info` completion of an op that did nothing: `applied: false` and
    the `reason` (a fault op's; a heal's error is its `error`). `unresolved`
    (a role nobody held) also tells the schedule there is nothing to heal."""
    value = dict(op.value or {})
    if op.f in HEAL_OF:
        value |= {"applied": False, "reason": why}
    if unresolved:
        value["unresolved"] = why
    return Reply(type="info", value=value, error=why)


class NemesisWorker:
    """Applies and heals faults; one instance for the run's nemesis thread."""

    def __init__(self, control: Control, nodes: Sequence[NodeHandle], db: DB) -> None:
        self.control, self.nodes, self.db = control, list(nodes), db
        self.names = [n.name for n in self.nodes]
        self._start_books()
        self.resolver = Resolver(self.names, self._status, self._placement, db.groups)
        self.shell = Shell(control)  # kills and pauses: one round trip on an open channel

    def _start_books(self) -> None:
        """What the worker keeps across faults (the simulator's worker too)."""
        self.active: dict[str, tuple[Fault, dict[str, Any]]] = {}
        self.slow_method: str | None = None
        # The failpoints a fault asked for, applied or not: heal-all switches
        # each off on every node, whatever came of the asking.
        self.failpoints_tried: set[str] = set()
        self.restarted: dict[str, float] = {}  # node -> when a heal restarted it (monotonic)

    def _status(self, name: str) -> dict[str, Any] | None:
        return self.db.status(name)

    def _placement(self, name: str) -> dict[str, Any] | None:
        return http_json(self.db.urls()[name] + "/admin/placement", timeout_s=1.5)

    async def invoke(self, op: Op) -> Reply:
        """Apply or heal; a fault that cannot be applied completes `info`."""
        try:
            if op.f == "compact-kill":
                value = await self._compact_kill(op)
            else:
                value = await self._blocking(self._do, op)
        except UnresolvedError as exc:
            return not_applied(op, str(exc), unresolved=True)
        except (ControlError, DBError, ValueError, RuntimeError) as exc:
            return not_applied(op, f"{type(exc).__name__}: {exc}")
        return applied(op, value)

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run blocking harness code (SSH, urllib) off the loop."""
        return await asyncio.to_thread(fn, *args)

    async def _post(self, call: maintenance.Call) -> dict[str, Any] | None:
        return await asyncio.to_thread(http_json, call.url, "POST", call.body,
                                       maintenance.ANSWER_WAIT_S)  # fmt: skip

    async def _compact_kill(self, op: Op) -> dict[str, Any]:
        """A kill landing `delay_ms` after a compaction or defragmentation
        request (`nemesis.maintenance`); healed as a kill."""
        v = dict(op.value or {})
        started = time.time()
        node, extra = await self._blocking(self._target, v, random.Random(v.get("seed", 0)))

        async def kill() -> Fault:
            fault: Fault = await self._blocking(self._process_fault_running, "kill", node, extra)
            return fault

        db: Any = self.db  # a Maintainable: the schedule draws compact-kill only for one
        fault, timed = await maintenance.around_kill(db, node, v, self._post, self._blocking, kill)
        killed = time.time()
        extra["maintenance"] = timed.as_value(killed)
        return {**self._record(op, v, fault, extra, started, killed), "kind": op.f}

    def _do(self, op: Op) -> dict[str, Any]:
        v = dict(op.value or {})
        if op.f == "heal-all":
            return self.heal_everything()
        if op.f in HEALS:
            return self._heal(str(v.get("kind")), v)
        rng = random.Random(v.get("seed", 0))
        started = time.time()
        fault, extra = self._apply(op.f, v, rng)
        return self._record(op, v, fault, extra, started, time.time())

    def _record(self, op: Op, v: dict[str, Any], fault: Fault, extra: dict[str, Any],
                started: float, applied: float) -> dict[str, Any]:  # fmt: skip
        """Keep the applied fault for its heal; its completion value, with when it
        was applied and how long after its trigger."""
        extra = {**extra, "applied_wall": round(applied, 6),
                 "apply_ms": round((applied - started) * 1000, 1)}  # fmt: skip
        trigger = v.get("trigger") or {}
        for key, field in (("wall", "reaction_ms"), ("seen_wall", "seen_to_applied_ms")):
            if isinstance(trigger.get(key), int | float):
                extra[field] = round((applied - trigger[key]) * 1000, 1)
        self.active[op.f] = (fault, extra)
        return {**v, **fault.as_value(), **extra}

    def _target(self, v: dict[str, Any], rng: random.Random) -> tuple[str, dict[str, Any]]:
        target = v.get("target") or (
            {"isolate-leader": "leader", "isolate-joining": "joining"}.get(v.get("grouping", ""))
        )
        if target in ("leader", *ROLE_TARGETS):
            started = time.time()
            found = self.resolver.resolve(str(target), v, rng)
            took = round((time.time() - started) * 1000, 1)
            return found.node, {"resolved": found.resolved, "node": found.node, "resolve_ms": took}
        if target == "joining":
            joining = (v.get("trigger") or {}).get("joining") or []
            if joining:
                node = rng.choice(sorted(joining))
                return node, {"resolved": "joining peer", "node": node}
        node = rng.choice(self._running())
        return node, {"resolved": RANDOM_NODE, "node": node}

    def _running(self) -> list[str]:
        """The nodes a random fault can land on: where the db runs now, when it
        says (its optional `running_in`; etcd: its members), else every node.
        Aimed at a spare etcd runs nothing on, 2 of 8 of a run's kills and
        pauses applied nothing (Docker seed 301)."""
        running_in = getattr(self.db, "running_in", None)
        return (running_in(self.names) if running_in is not None else None) or self.names

    def _one_trip(self) -> process.ProcessSpec | None:
        """The pidfile spec when the db's kill and pause are ProcessDB's own."""
        db = self.db
        if not isinstance(db, ProcessDB) or db.spec.pidfile is None:
            return None
        cls: Any = type(db)  # a subclass that overrides kill or pause keeps its own
        return db.spec if cls.kill is ProcessDB.kill and cls.pause is ProcessDB.pause else None

    def _apply(
        self, kind: str, v: dict[str, Any], rng: random.Random
    ) -> tuple[Fault, dict[str, Any]]:
        if kind == "partition":
            return self._partition(v, rng)
        node, extra = self._target(v, rng)
        if kind in ("kill", "pause"):
            return self._process_fault_running(kind, node, extra), extra
        if kind == "slow":
            return self._slow(node, extra)
        if kind == "clock":  # ember follows the offset file (nemesis.clock)
            return clock_fault(self.control, node, v), extra
        if kind == "drop-replies":
            return self._drop_replies(node, v), extra
        raise ValueError(f"unknown fault kind {kind!r}")

    def _process_fault_running(self, kind: str, node: str, extra: dict[str, Any]) -> Fault:
        fault = self._process_fault(kind, node)
        pids = fault.detail.get("pids")
        if isinstance(pids, dict) and not pids.get(node):
            # The node (a role's holder, or a random one: an etcd spare) is
            # down: nothing was killed or paused, and nothing is to heal.
            raise UnresolvedError(f"the target is not running ({node}, {extra['resolved']})")
        return fault

    def _process_fault(self, kind: str, node: str) -> Fault:
        """kill -9 or SIGSTOP `node`'s database process."""
        spec = self._one_trip()
        if spec is None:
            return (self.db.kill if kind == "kill" else self.db.pause)(self.control, [node])
        now = process.kill_now if kind == "kill" else process.pause_now
        return now(self.shell, [node], spec)

    def _partition(self, v: dict[str, Any], rng: random.Random) -> tuple[Fault, dict[str, Any]]:
        grudge, extra = self._grudge(v, rng)
        return self._apply_grudge(grudge), extra

    def _apply_grudge(self, grudge: part.Grudge) -> Fault:
        """Cut the links the grudge names (iptables on every node)."""
        return part.partition(self.control, self.nodes, grudge)

    def _grudge(self, v: dict[str, Any], rng: random.Random) -> tuple[part.Grudge, dict[str, Any]]:
        """Who drops whose packets, for the op's grouping (and who it aimed at)."""
        grouping = v.get("grouping", "halves")
        names = self.names
        if grouping in ("isolate-leader", "isolate-joining", "isolate"):
            node, extra = self._target(v, rng)
            grudge = part.isolate(names, node)
        elif grouping == "one-way":
            node, extra = self._target({**v, "target": "leader"}, rng)
            grudge, extra = part.one_way([node], [n for n in names if n != node]), extra
        elif grouping == "ring":
            grudge, extra = part.majorities_ring(names, rng), {}
        elif grouping == "bridge" and len(names) >= 3:
            grudge, extra = part.bridge(names, rng), {}
        else:
            grudge, extra = part.random_halves(names, rng), {}
        return grudge, extra

    def _slow(self, node: str, extra: dict[str, Any]) -> tuple[Fault, dict[str, Any]]:
        others = [n for n in self.names if n != node]
        try:
            fault = slow(self.control, self.nodes, {key: [node] for key in others},
                         delay_ms=SLOW_DELAY_MS, jitter_ms=SLOW_JITTER_MS)  # fmt: skip
            self.slow_method = "netem"
            return fault, {**extra, "method": "netem"}
        except NetemUnavailableError:
            pass
        if not getattr(self.db, "has_failpoints", True):
            # No netem and no failpoint (etcd from Debian): throttle the links
            # instead. An HTB class (no netem needed) caps what the others send
            # the target, so its catch-up (entries, snapshot) crawls and its
            # queue holds even heartbeats back.
            fault = slow(self.control, self.nodes, {key: [node] for key in others},
                         rate_kbit=SLOW_RATE_KBIT)  # fmt: skip
            self.slow_method = "rate-limit"
            return fault, {**extra, "method": "rate-limit"}
        params = {"delay_ms": SLOW_DELAY_MS, "peer": node}
        self._listening(others)
        self.failpoints_tried.add(SLOW_FAILPOINT)
        asked: list[str] = []
        try:
            for other in others:
                # Asked counts before the answer: a node that does not answer
                # in time may still have switched the failpoint on.
                asked.append(other)
                self.db.set_failpoint(other, SLOW_FAILPOINT, params)
        except (ControlError, DBError, RuntimeError) as exc:
            # Half a slow fault must not outlive the error; what cannot be
            # switched off now waits for the heal-all sweep, and says so.
            left = self._failpoints_off(asked, SLOW_FAILPOINT)
            if left:
                raise DBError(f"{exc}; raft.append.delay may stay on at {', '.join(left)} "
                              f"until heal-all") from None  # fmt: skip
            raise
        except BaseException:
            self._failpoints_off(asked, SLOW_FAILPOINT)
            raise
        self.slow_method = "failpoint"  # only once applied: the run's note says so
        fault = Fault(kind="slow", detail={"targets": {o: [node] for o in others}},
                      commands={o: [f"POST /admin/failpoints/raft.append.delay {params}"]
                                for o in others})  # fmt: skip
        return fault, {**extra, "method": "failpoint"}

    def _heal(self, kind: str, v: dict[str, Any]) -> dict[str, Any]:
        entry = self.active.pop(kind, None)
        if entry is None:
            return {**v, "healed": None}
        fault, extra = entry
        if kind == "slow" and extra.get("method") == "failpoint":
            left = self._failpoints_off(list(fault.detail.get("targets", {})), SLOW_FAILPOINT)
            if left:
                raise DBError(f"{SLOW_FAILPOINT} not confirmed off on {', '.join(left)}: "
                              f"switched off again at heal-all")  # fmt: skip
            return {**v, "healed": fault.as_value()}
        if kind == "drop-replies":
            node = str(fault.detail["node"])
            if self._failpoints_off([node], DROP_FAILPOINT):
                raise DBError(f"{DROP_FAILPOINT} not confirmed off on {node}: "
                              f"switched off again at heal-all")  # fmt: skip
            return {**v, "healed": fault.as_value()}
        healed = fault.heal(self.control)
        if kind in ("kill", "compact-kill"):
            now = time.monotonic()
            for node in (*(fault.detail.get("pids") or {}), *(fault.detail.get("nodes") or ())):
                self.restarted[str(node)] = now
        return {**v, **healed.as_value()}

    def _listening(self, nodes: Sequence[str]) -> None:
        """Wait (at most RESTART_LISTEN_S after its restart) for each of `nodes`
        this worker restarted just now to answer its status: a failpoint fault
        0.2 s after the heal of a kill found the node not listening yet and
        applied nothing (Docker seed 306, drop-replies)."""
        for node in nodes:
            until = self.restarted.get(node, -RESTART_LISTEN_S) + RESTART_LISTEN_S
            while time.monotonic() < until and self.db.status(node) is None:
                time.sleep(RESTART_POLL_S)

    def heal_everything(self) -> dict[str, Any]:
        """Heal every fault (recorded ones first), restart and resume every node."""
        healed = []
        for kind in list(self.active):
            with _quiet():
                healed.append(self._heal(kind, {"kind": kind}).get("kind"))
        self.shell.close()
        heal_all(self.control)
        self.db.start(self.control, self.names)  # idempotent: restarts only the dead
        for failpoint in sorted(self.failpoints_tried):
            left = self._failpoints_off(self.names, failpoint)
            # A node the heal of a kill (or `start` just now) restarted may not
            # listen yet: asked 0.5 s after its restart, n5 refused the call and
            # the run ended unknown (Docker seed 304). It is asked again until
            # it answers or the wait runs out.
            deadline = time.monotonic() + FAILPOINT_SWEEP_S
            while left and time.monotonic() < deadline:
                time.sleep(FAILPOINT_SWEEP_POLL_S)
                left = self._failpoints_off(left, failpoint)
            if left:
                raise DBError(f"{failpoint} not confirmed off on {', '.join(left)} after "
                              f"heal-all: the quiet period may still be faulted there")  # fmt: skip
        started = f"start {getattr(self.db, 'name', 'the db')} where not running"
        return {"healed": healed, "commands": {"*": ["heal_all", started]}}

    def _drop_replies(self, node: str, v: dict[str, Any]) -> Fault:
        """`node` serves client requests and loses a share of its success
        answers (ember's http.drop-reply failpoint); DBError if not switched on
        (a db without failpoints refuses it, as etcd's `set_failpoint` does)."""
        params = {"probability": float(v.get("probability", 0.5))}
        self._listening([node])
        self.failpoints_tried.add(DROP_FAILPOINT)
        try:
            self.db.set_failpoint(node, DROP_FAILPOINT, params)
        except BaseException:
            # Not confirmed is not refused: the node may have switched it on.
            self._failpoints_off([node], DROP_FAILPOINT)
            raise
        asked = f"POST /admin/failpoints/{DROP_FAILPOINT} {params}"
        return Fault(kind="drop-replies", detail={"node": node, **params},
                     commands={node: [asked]})  # fmt: skip

    def _failpoints_off(self, names: Sequence[str], failpoint: str) -> list[str]:
        """Switches `failpoint` off on every one of `names`, each tried even
        when another does not answer; returns those not confirmed off."""
        left = []
        for node in names:
            try:
                self.db.set_failpoint(node, failpoint, None)
            except (ControlError, DBError, RuntimeError):
                left.append(node)
        return left


def _quiet() -> contextlib.suppress:
    """Suppress the errors healing a dead node may raise: heal_all follows anyway."""
    return contextlib.suppress(ControlError, DBError, RuntimeError)
