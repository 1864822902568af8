"""`faultline run --backend sim`: the whole of ember, and the harness, on the simulator.

Theory of operation. The run is the Docker run's lifecycle (harness.runner)
on one deterministic `SimLoop`, in this process:

1. the world: one simulated host per plan node, each running the ember
   daemon's own `serve()` with the TOML config `EmberDB` writes, a data
   directory in a scratch folder, the simulated network and disk
   (ember.sim.loop / wire / hostos / world);
2. the db awaited healthy, its zone created, the plan's failpoints set;
3. the main phase through `harness.runner._drive`: the same generators,
   interpreter, workers and clients (EmberClient, the metastore and watch
   workers: aiohttp over the simulated network), with `SimNemesis` applying
   the schedule's faults to the world and `SimPhaseWatcher` feeding phase
   triggers from the nodes' audit events the instant they are written;
4. heal-all, healthy again, the quiet period and the final reads, as on
   Docker; then each node's events.jsonl and ember.log into nodes/<n>/;
5. every checker on the store's files (harness.runner.judge), the `sim`
   checker among them: all along, `ember.sim.omniscient` watched every
   node's Readies through the runtime's observer seam and checked Raft's
   safety properties per group with the whole system in view; its report is
   the run dir's sim-invariants.json.

Everything is on virtual time: history times, audit `mono_ns` and `wall`.
One seed gives one run, byte for byte (the loop's order, the seeded
streams, and no thread or wall clock consulted). What the simulator cannot
play is refused before anything runs (`unsupported`): another db, a
nemesis or workload it has no primitive for.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from checkers.sim import REPORT_FILE
from ember.raft import RaftConfig
from ember.runtime import NodeRuntime
from ember.sim.hostos import Disk, simulated_os
from ember.sim.loop import SimLoop, SimulationStalled, SimulationTimeout, run_simulation
from ember.sim.omniscient import Omniscient
from ember.sim.world import NodeLogRouter, World, seeded
from harness import plan as plans
from harness.backends.base import NodeHandle, SshTarget
from harness.dbs.registry import SYSTEMS
from harness.history_writer import HistoryWriter
from harness.process_db import DBError
from harness.progress import RunStatus
from harness.runlog import FILE_NAME as HARNESS_LOG
from harness.runner import HEALTHY_TIMEOUT_S, RunError, _drive, _failpoints, _Parts
from harness.sim.db import SimEmberDB
from harness.sim.nemesis import SimNemesis, SimPhaseWatcher
from harness.store import RunDir
from nemesis.generator import FAULT_KINDS

SIM_SYSTEMS = ("ember",)
# A run's virtual time may not pass this many times its time limit plus settling.
MAX_TIME_FACTOR = 20


def unsupported(plan: plans.Plan) -> str | None:
    """Why the simulator cannot play `plan`, or None."""
    if plan.db not in SIM_SYSTEMS:
        return f"--backend sim simulates {', '.join(SIM_SYSTEMS)} only, not {plan.db}"
    known = SYSTEMS[plan.db].workloads
    bad = [w for w in plan.workload if w not in known]
    if bad:
        return f"--backend sim has no workload {bad[0]!r} for {plan.db}"
    bad = [n for n in plan.nemesis if n not in FAULT_KINDS]
    if bad:
        return f"--backend sim has no nemesis {bad[0]!r} (known: {', '.join(FAULT_KINDS)})"
    if plan.db_settings.get("unsafe_no_fsync"):
        # The daemon's main() turns fsync off process-wide; the simulated disk
        # decides durability itself, so the setting would be silently ignored.
        return "--backend sim cannot honour the unsafe_no_fsync setting (the disk is simulated)"
    return None


def execute_sim(
    plan: plans.Plan, run: RunDir, status: RunStatus, log: Any = lambda _m: None
) -> list[str]:
    """Play `plan` in the simulator, writing the run's files; returns the run's notes."""
    why = unsupported(plan)
    if why is not None:
        raise RunError(why)
    loop = SimLoop(plan.seed, max_time=MAX_TIME_FACTOR * (plan.time_limit_s + 300))
    disk = Disk(seeded(plan.seed, "disk"))
    world = World(loop, disk, boots=seeded(plan.seed, "boot"))
    margin = int(plan.db_settings.get("catchup_margin", RaftConfig().catchup_margin))
    invariants = Omniscient(loop.time, margin)
    world.crash_listeners.append(invariants.on_crash)
    NodeRuntime.observers.append(invariants)
    scratch = Path(tempfile.mkdtemp(prefix=f"faultline-sim-{plan.seed}-"))
    router = NodeLogRouter(world, run.path / HARNESS_LOG)
    root = logging.getLogger()
    saved_level = root.level
    root.addHandler(router)
    root.setLevel(logging.INFO)
    try:
        with simulated_os(loop, disk, world.exited):
            notes: list[str] = run_simulation(loop, _main(plan, run, status, log, world, scratch))
    except (SimulationStalled, SimulationTimeout) as exc:
        raise RunError(f"simulation: {exc}") from None
    finally:
        world.power_off()
        NodeRuntime.observers.remove(invariants)
        _write_report(run.path / REPORT_FILE, invariants)
        status.started = time.monotonic() - loop.time()
        root.removeHandler(router)
        root.setLevel(saved_level)
        router.close()
        shutil.rmtree(scratch, ignore_errors=True)
        _forget_apps()
    summary = (f"simulated {loop.time():.1f} s: {loop.handles_run} handles, "
               f"{sum(n.incarnations for n in world.nodes.values())} node starts, "
               f"{len(world.crashes)} disk crashes ({disk.torn} torn)")  # fmt: skip
    log(summary)
    notes.append(summary)
    if invariants.violations or invariants.errors:
        counts = ", ".join(f"{p} x{n}" for p, n in sorted(invariants.counts.items()))
        notes.append(f"omniscient invariants: {counts or 'no violation'}; "
                     f"{invariants.error_count} observer errors")  # fmt: skip
    notes += [f"node failed to start: {f}" for f in world.failures]
    return notes


def _forget_apps() -> None:
    """Lets the played world go. aiohttp keeps the middleware chains it built in
    a process-wide LRU (1,024 entries) keyed on the applications, and each
    application holds its loop, so every run's whole world (about 9 MB for the
    default plan, 56 entries) stayed alive for the next ~18 runs of a process
    that plays many: explore's workers, a sweep, the test suite. The cache only
    saves rebuilding a chain; a private name, so looked up with care."""
    import aiohttp.web_app

    clear = getattr(getattr(aiohttp.web_app, "_cached_build_middleware", None), "cache_clear", None)
    if callable(clear):
        clear()


def _write_report(path: Path, invariants: Omniscient) -> None:
    """sim-invariants.json: what the omniscient checker found (checkers.sim reads it)."""
    path.write_text(json.dumps(invariants.report(), indent=2) + "\n", encoding="utf-8")


async def _main(
    plan: plans.Plan, run: RunDir, status: RunStatus, log: Any, world: World, scratch: Path
) -> list[str]:
    system = SYSTEMS[plan.db]
    wire = world.loop.wire
    nodes = [
        NodeHandle(name=name, ip=wire.add_host(name, i + 1), ssh=SshTarget(host="simulated"))
        for i, name in enumerate(plan.nodes)
    ]
    names = [n.name for n in nodes]
    db = SimEmberDB(nodes, plan.db_settings, plan.seed, world, scratch)
    status.started = time.monotonic()  # the display counts simulated seconds
    status.stage = "db start"
    db.configure(plan.workload)
    db.install()
    db.start(None, names)
    try:
        await db.wait_healthy_async(names, HEALTHY_TIMEOUT_S)
        await db.setup_async(plan.workload)
        log(f"{db.name} healthy on {', '.join(names)} (simulated)")
        notes = _failpoints(plan, db, names, log)
        parts = _Parts(plan, nodes, None, system, db, run, status, log,  # type: ignore[arg-type]
                       nemesis_worker=SimNemesis(world, nodes, db),
                       phase_source=lambda on_phase: SimPhaseWatcher(names, on_phase))  # fmt: skip
        with HistoryWriter(run.history) as writer:
            notes += await _drive(parts, writer)
    except DBError as exc:
        raise RunError(str(exc)) from None
    finally:
        status.stage = "collecting logs"
        missing = db.collect(None, names, run)
        await db.close()
    return notes + [f"could not collect {m}" for m in missing]
