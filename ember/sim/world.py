"""A cluster of real ember nodes on the simulated loop, network and disk.

Theory of operation
-------------------
Each node is `ember.server.serve`, the daemon's own entry point, run as a
`Proc` of the `SimLoop` with the `NodeConfig` the daemon would parse from
its TOML. The world keeps, per node name, the host address and data
directory (which outlive incarnations) and the current incarnation:

- `start` spawns a new incarnation (a restart reads the simulated disk),
  which serves after a boot time drawn from the seed (`BOOT_S`);
- `kill` is SIGKILL plus a crash of the node's disk (`hostos.Disk.crash`),
  told to `crash_listeners`;
- `stop` delivers SIGTERM to the handler `serve` installed;
- `pause` / `resume` are SIGSTOP / SIGCONT;
- `runtime(name)` is the live node's `NodeRuntime` (None when it is dead,
  paused or not serving yet): what the harness reads instead of asking
  `/admin/status` over a network it would have to wait on.

A node whose `serve` fails (its store refuses to open after a crash, say)
is recorded in `failures` with the error: a finding, never swallowed.
Each node's log lines go to `<root>/<name>/ember.log`, as the daemon's do.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.placement.plane import ControlPlane
from ember.runtime import NodeConfig, NodeRuntime
from ember.server import serve
from ember.sim.hostos import Disk, ProcessExited, close_descriptors
from ember.sim.loop import SimLoop
from ember.sim.procs import HostClock, Proc, current_proc

log = logging.getLogger(__name__)

# How long a process takes from exec to serving, drawn per incarnation. The
# loop's timers are exact, so nodes started at one instant would tick in
# lockstep for ever: every node's election timer would fire on one 50 ms
# grid, and two voters whose randomized timeouts drew the same tick count
# would split the vote each time that happened (one round in ten), which
# real hosts, whose ticks fall at unrelated phases, almost never do. Seeds
# found three split rounds in a row after a heal this way (notes, session 18).
BOOT_S = (0.0, 0.1)


@dataclass(eq=False)
class SimNode:
    """One node name: its address, files and current incarnation."""

    name: str
    host: str
    root: Path
    config: NodeConfig
    proc: Proc | None = None
    runtime: NodeRuntime | None = None
    plane: ControlPlane | None = None
    incarnations: int = 0
    task: asyncio.Task[Any] | None = None
    clock: HostClock = field(default_factory=HostClock)  # the host's, across incarnations

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive


@dataclass(eq=False)
class World:
    """The simulated cluster (see the module doc)."""

    loop: SimLoop
    disk: Disk
    nodes: dict[str, SimNode] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    # Told the node's name when an incarnation dies (the omniscient checker).
    crash_listeners: list[Callable[[str], None]] = field(default_factory=list)
    boots: random.Random = field(default_factory=lambda: random.Random(0))  # boot times

    def add(self, name: str, host: str, root: Path, config: NodeConfig) -> SimNode:
        """Register a node (not started)."""
        root.mkdir(parents=True, exist_ok=True)
        node = SimNode(name, host, root, config)
        self.nodes[name] = node
        return node

    # -- process control ---------------------------------------------------

    def start(self, name: str) -> bool:
        """Start a new incarnation unless one runs; True if it started one."""
        node = self.nodes[name]
        if node.running:
            return False
        node.incarnations += 1
        proc = Proc(f"{name}#{node.incarnations}", node.host, clock=node.clock)
        node.proc, node.runtime, node.plane = proc, None, None

        def started(runtime: NodeRuntime, plane: ControlPlane | None) -> None:
            if node.proc is proc:
                node.runtime, node.plane = runtime, plane

        boot_s = self.boots.uniform(*BOOT_S)
        node.task = self.loop.spawn(proc, self._serve(node, proc, started, boot_s))
        return True

    async def _serve(self, node: SimNode, proc: Proc, started: Any, boot_s: float) -> None:
        try:
            await asyncio.sleep(boot_s)
            await serve(node.config, started)
        except (OSError, RuntimeError, ValueError) as err:
            if not self.loop.is_running() or not proc.alive:
                # The run is over and the loop is ending every process (the
                # power-off of `_abandon`), or this incarnation was killed:
                # not something the node did.
                raise
            # What the daemon prints and exits 1 for; in the simulation, a finding.
            self.failures.append(f"{proc.name}: {type(err).__name__}: {err}")
            log.error("%s failed: %s", proc.name, err)
            self._dead(node, proc)

    def kill(self, name: str) -> list[str]:
        """SIGKILL the running incarnation and crash its disk; what the crash lost."""
        node = self.nodes[name]
        if not node.running or node.proc is None:
            return []
        return self._dead(node, node.proc)

    def _dead(self, node: SimNode, proc: Proc) -> list[str]:
        if node.proc is proc and node.runtime is not None:
            # The kernel closes its files: what its `finally` blocks would
            # record as `kill` ends them is not part of the run.
            node.runtime.audit.close()
        self.loop.kill(proc)
        close_descriptors(proc.fds)
        if node.proc is proc:
            node.runtime, node.plane = None, None
        lost = self.disk.crash(node.root / "data")
        for listener in self.crash_listeners:
            listener(node.name)
        self.crashes.append(f"{proc.name}: " + ("; ".join(lost) or "nothing unsynced"))
        return lost

    def power_off(self) -> None:
        """The run is over: the kernel closes what the processes still running
        held open. Their coroutines are closed with the loop, but a raw
        descriptor (a WAL and its lock) is closed only by code that no longer
        runs, so without this a process playing many runs (explore's workers,
        the test suite) kept every run's files open, deleted with the run's
        scratch dir yet holding their disk space."""
        for node in self.nodes.values():
            if node.proc is not None:
                close_descriptors(node.proc.fds)

    def exited(self, proc: Proc, code: int) -> None:
        """`os._exit` in a node (the crash failpoint): it dies as a kill would."""
        for node in self.nodes.values():
            if node.proc is proc:
                self._dead(node, proc)
                return

    def stop(self, name: str) -> bool:
        """SIGTERM (the daemon stops cleanly); False if not running."""
        node = self.nodes[name]
        if not node.running or node.proc is None:
            return False
        return self.loop.deliver_signal(node.proc, signal.SIGTERM)

    def pause(self, name: str) -> bool:
        """SIGSTOP; False if it was not running."""
        node = self.nodes[name]
        if not node.running or node.proc is None or node.proc.paused:
            return False
        self.loop.pause(node.proc)
        return True

    def resume(self, name: str) -> bool:
        """SIGCONT; False if it was not paused."""
        node = self.nodes[name]
        if node.proc is None or not node.proc.paused:
            return False
        self.loop.resume(node.proc)
        return True

    # -- reading state -------------------------------------------------------

    def runtime(self, name: str) -> NodeRuntime | None:
        """The serving runtime of a running, unpaused node."""
        node = self.nodes[name]
        if node.proc is None or not node.proc.alive or node.proc.paused:
            return None
        return node.runtime

    def state(self, name: str) -> str:
        """running / paused / dead (for the summary)."""
        proc = self.nodes[name].proc
        if proc is None or not proc.alive:
            return "dead"
        return "paused" if proc.paused else "running"


class NodeLogRouter(logging.Handler):
    """Sends each log record to the ember.log of the node whose code logged it."""

    def __init__(self, world: World, harness_log: Path) -> None:
        super().__init__(logging.DEBUG)
        self.world = world
        self._files: dict[str, Any] = {}
        self._harness = harness_log
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        proc = current_proc()
        if proc is not None and not proc.alive:
            return  # the `finally` blocks `SimLoop.kill` ends a killed process with
        name = proc.name.split("#", 1)[0] if proc is not None else "harness"
        node = self.world.nodes.get(name)
        path = node.root / "ember.log" if node is not None else self._harness
        fh = self._files.get(str(path))
        if fh is None:
            # Line-buffered: the run collects the file while the nodes still run.
            fh = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
            self._files[str(path)] = fh
        fh.write(self.format(record) + "\n")

    def close(self) -> None:
        for fh in self._files.values():
            fh.close()
        self._files.clear()
        super().close()


def seeded(seed: int | str, name: str) -> random.Random:
    """A named stream of the simulation's seed."""
    return random.Random(f"{seed}:{name}")


__all__ = ["NodeLogRouter", "ProcessExited", "SimNode", "World", "seeded"]
