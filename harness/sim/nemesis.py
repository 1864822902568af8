"""The nemesis under the simulator: the same schedule, targets and records, applied to the world.

Theory of operation. `SimNemesis` is `NemesisWorker` with its primitives
moved from SSH to the simulated world: a partition's grudge cuts links on
the wire (`Wire.cut`, as iptables DROP does), kill and pause are the world's
SIGKILL (with a disk crash) and SIGSTOP (`compact-kill` is that kill, its
delay in virtual time after the compaction request went out over the
simulated network), slow catch-up delays the links
toward the target (netem's 300 +- 50 ms; the completion's `method` is
`wire`), and drop-replies switches ember's `http.drop-reply` failpoint in
the target's runtime, as the admin route would. Target resolution is
`nemesis.targets.Resolver`'s, asking the nodes one after another in a
seeded order instead of racing threads (so a seed picks the same holder
every time); statuses are read in process, with
no delay, and the placement document is fetched over the simulated network
first when a role needs it. Faults apply inline on the loop: a fault aimed
at a phase lands in the same virtual instant the phase was reported.

`SimPhaseWatcher` is the phase source: an `AuditLog` tap hands every event
to `PhaseWatcher.handle_event` on the harness's own context the moment a
node writes it, instead of tailing files over SSH.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ember.audit import AuditLog
from ember.sim.procs import Proc, current_proc
from ember.sim.world import World
from harness.backends.base import NodeHandle
from harness.interpreter import Reply
from harness.process_db import DBError
from harness.sim.db import SimEmberDB
from nemesis import partition as part
from nemesis.fault import Fault
from nemesis.maintenance import ANSWER_WAIT_S, Call
from nemesis.phase import PhaseWatcher
from nemesis.schedule import DROP_FAILPOINT, SLOW_DELAY_MS, SLOW_JITTER_MS, NemesisWorker
from nemesis.targets import FETCH_TIMEOUT_S, Doc, Resolver, UnresolvedError
from workloads.generator import Op

ROLE_NEEDS_PLACEMENT = ("placement-driver", "primary")


class SequentialResolver(Resolver):
    """`Resolver` asking one node after another: deterministic under the simulator."""

    def _all(self, fetch: Callable[[str], Doc | None]) -> dict[str, Doc | None]:
        return {n: fetch(n) for n in self.names}

    def _first(self, fetch: Callable[[str], Doc | None], rng: random.Random) -> tuple[str, Doc]:
        order = list(self.names)
        rng.shuffle(order)
        for node in order:
            doc = fetch(node)
            if doc is not None:
                return node, doc
        raise UnresolvedError(f"no node answered within {self.timeout_s:g}s")


class SimNemesis(NemesisWorker):
    """Applies and heals faults in the simulated world (see the module doc)."""

    def __init__(self, world: World, nodes: Sequence[NodeHandle], db: SimEmberDB) -> None:
        self.world, self.db, self.sim_db = world, db, db
        self.control = None  # type: ignore[assignment]  # nothing goes over SSH
        self.nodes = list(nodes)
        self.names = [n.name for n in self.nodes]
        # A restart here is no reason to wait (its _heal records none): the
        # world does not move while a fault is applied.
        self._start_books()
        self._placements: dict[str, Doc | None] = {}
        self.resolver = SequentialResolver(self.names, db.status, self._placement, db.groups)

    def _placement(self, name: str) -> Doc | None:
        return self._placements.get(name)

    async def invoke(self, op: Op) -> Reply:
        """Apply or heal inline; a fault that cannot be applied completes `info`."""
        target = (op.value or {}).get("target")
        if target in ROLE_NEEDS_PLACEMENT:
            self._placements = await self._first_placement()
        try:
            return await super().invoke(op)
        finally:
            self._placements = {}

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)  # inline: the world does not move meanwhile

    async def _post(self, call: Call) -> dict[str, Any] | None:
        return await self.sim_db.http_json(call.url, "POST", call.body, ANSWER_WAIT_S)

    async def _first_placement(self) -> dict[str, Doc | None]:
        """Ask every node at once and keep the first answer, as the Docker resolver
        does (each is a linearizable read): a paused node costs no timeout."""
        urls = self.sim_db.urls()

        async def ask(name: str) -> tuple[str, Doc | None]:
            url = urls[name] + "/admin/placement"
            return name, await self.sim_db.http_json(url, timeout_s=FETCH_TIMEOUT_S)

        # Kept in node order: a set of futures iterates (and so cancels) in id()
        # order, which differs between processes and would break replays.
        asks = [asyncio.ensure_future(ask(n)) for n in self.names]
        try:
            while not all(a.done() for a in asks):
                waiting = [a for a in asks if not a.done()]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for fut in asks:
                    if fut.done() and not fut.cancelled():
                        name, doc = fut.result()
                        if doc is not None:
                            return {name: doc}
        finally:
            for fut in asks:
                if not fut.done():
                    fut.cancel()
        return {}

    # -- primitives ------------------------------------------------------------

    def _process_fault(self, kind: str, node: str) -> Fault:
        return (self.sim_db.kill if kind == "kill" else self.sim_db.pause)(None, [node])

    def _apply(
        self, kind: str, v: dict[str, Any], rng: random.Random
    ) -> tuple[Fault, dict[str, Any]]:
        if kind != "clock":
            return super()._apply(kind, v, rng)
        node, extra = self._target(v, rng)
        clock = self.world.nodes[node].clock
        clock.reset()
        clock.since = self.world.loop.time()
        mode = v.get("mode")
        if mode == "bump":
            clock.offset_s = float(v["delta_s"])
            what = f"wall clock {clock.offset_s:+g} s"
        elif mode == "strobe":
            clock.strobe_s, clock.period_s = float(v["delta_s"]), float(v["period_s"])
            what = f"wall clock +-{clock.strobe_s:g} s, flipping every {clock.period_s:g} s"
        elif mode == "drift":
            clock.rate = float(v["rate"])
            what = f"wall clock at {clock.rate:g}x"
        else:
            raise ValueError(f"unknown clock fault mode {mode!r}")
        return Fault(kind="clock", detail={"node": node}, commands={node: [f"sim: {what}"]}), extra

    def _apply_grudge(self, grudge: part.Grudge) -> Fault:
        wire = self.world.loop.wire
        wire.heal_cuts()  # a new partition replaces the one in place, as the chain flush does
        commands: dict[str, Sequence[str]] = {}
        for dst in sorted(grudge):
            for src in sorted(grudge[dst]):
                wire.cut(src, dst)
            commands[dst] = [f"sim: {dst} drops packets from {src}" for src in sorted(grudge[dst])]
        detail = {"grudge": {n: sorted(p) for n, p in sorted(grudge.items())}}
        return Fault(kind="partition", detail=detail, commands=commands)

    def _slow(self, node: str, extra: dict[str, Any]) -> tuple[Fault, dict[str, Any]]:
        wire = self.world.loop.wire
        others = [n for n in self.names if n != node]
        for other in others:
            wire.delay(other, node, SLOW_DELAY_MS, SLOW_JITTER_MS)
        self.slow_method = "wire"
        fault = Fault(
            kind="slow",
            detail={"targets": {o: [node] for o in others}},
            commands={o: [f"sim: delay {o} -> {node} {SLOW_DELAY_MS:g}ms "
                          f"+- {SLOW_JITTER_MS:g}ms"] for o in others},
        )  # fmt: skip
        return fault, {**extra, "method": "wire"}

    def _heal(self, kind: str, v: dict[str, Any]) -> dict[str, Any]:
        entry = self.active.pop(kind, None)
        if entry is None:
            return {**v, "healed": None}
        fault, _extra = entry
        wire = self.world.loop.wire
        commands: Mapping[str, Sequence[str]]
        if kind == "partition":
            wire.heal_cuts()
            commands = {n: ["sim: heal cuts"] for n in fault.commands}
        elif kind == "slow":
            wire.heal_delays()
            commands = {n: ["sim: heal delays"] for n in fault.commands}
        elif kind in ("kill", "compact-kill"):
            commands = self.sim_db.start(None, list(fault.detail.get("pids", {}))).commands
        elif kind == "pause":
            commands = self.sim_db.resume(None, list(fault.detail.get("pids", {}))).commands
        elif kind == "clock":
            node = str(fault.detail["node"])
            self.world.nodes[node].clock.reset()
            commands = {node: ["sim: wall clock in step again"]}
        elif kind == "drop-replies":
            node = str(fault.detail["node"])
            self.sim_db.set_failpoint(node, DROP_FAILPOINT, None)
            commands = {node: [f"DELETE /admin/failpoints/{DROP_FAILPOINT}"]}
        else:
            raise ValueError(f"unknown fault kind {kind!r}")
        healed = Fault(kind=f"heal-{kind}", detail=dict(fault.detail), commands=commands)
        return {**v, **healed.as_value()}

    def heal_everything(self) -> dict[str, Any]:
        """Heal every fault, resume and start every node."""
        healed = [self._heal(kind, {"kind": kind}).get("kind") for kind in list(self.active)]
        self.world.loop.wire.heal()
        for name in self.names:
            self.world.nodes[name].clock.reset()
            self.world.resume(name)
        for failpoint in sorted(self.failpoints_tried):
            for name in self.names:
                try:
                    self.sim_db.set_failpoint(name, failpoint, None)
                except DBError:  # a dead node: it restarts without it
                    self.sim_db.remember_failpoint(name, failpoint, None)
        self.sim_db.start(None, self.names)
        return {
            "healed": healed,
            "commands": {"*": ["sim: heal wire", "sim: resume and start all"]},
        }


class SimPhaseWatcher(PhaseWatcher):
    """Phase observations from an `AuditLog` tap instead of `tail -F` (module doc)."""

    def __init__(self, names: Sequence[str], on_phase: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(None, names, "", on_phase)  # type: ignore[arg-type]
        self._harness: Proc | None = None

    def start(self) -> None:
        self._harness = current_proc()
        AuditLog.taps.append(self._tap)

    def stop(self) -> None:
        if self._tap in AuditLog.taps:
            AuditLog.taps.remove(self._tap)

    def _tap(self, event: dict[str, Any]) -> None:
        harness = self._harness
        if harness is None:
            self.handle_event(event)
            return
        # The observation belongs to the harness, not to the node that wrote it.
        asyncio.get_running_loop().call_soon(self.handle_event, dict(event), context=harness.ctx)
