"""The run lifecycle: plan -> cluster -> db -> workload + nemesis -> heal -> check -> store.

Theory of operation (Jepsen's `core/run!`). In order:

1. the image (docker: built or found cached) and the cluster (backend `up`);
2. a fresh run directory with `test.json` (the plan, seed first) and the
   fault journal `faults.jsonl` (`nemesis.journal`), made only now: a run
   that cannot start (no engine, no image, hosts unreachable) raises
   `RunNotStartedError` and leaves no run dir that the store, the index or the
   lake could count as a run;
3. the database configured for the plan's workloads (the DB's optional
   `configure`), installed, started on every node, awaited healthy, and
   set up (its optional `setup`: ember creates its zone here);
4. the main phase: one `Interpreter` runs the client (register), admin
   (change-peers) and nemesis generators for `time_limit_s`, while a
   `PhaseWatcher` tails the nodes' audit logs and feeds the phase-triggered
   nemesis; every event goes to history.jsonl as it happens. As it starts,
   timeline.json records the clock contract (docs/events.md, "Placed
   walls"): the history's zero on the harness's wall and monotonic clocks,
   and each node's clock offset, measured again after every restart op
   and at the end (harness.clock_offsets);
5. `heal-all` (a nemesis op, so the history records it), the database
   awaited healthy again (for ember with a zone: every rebalance finished),
   a quiet period, then one final read per key, then what closes the main
   phase's open ends (the metastore's watch chain: `System.closing`), and (ember) every node
   asked to write each group's applied state to its audit log, so
   convergence compares replicas where they end;
6. logs and audit events collected into nodes/<n>/;
7. the cluster healed and brought down (unless `leave_running`) — on any
   error and on SIGINT / SIGTERM too, with further signals ignored while
   cleaning up;
8. the checkers run on the store's files; results.json written.

The exit code follows DESIGN.md: 0 valid, 1 invalid, 2 unknown or error. A
run that fails before it has a history is `unknown` with the error as the
reason; so is one whose traffic or fault/change overlap was too weak
(`checkers.stats`). `--backend sim` plays the same lifecycle on the
whole-system simulator instead (`harness.simrun`): steps 2-7 on virtual
time, with the simulator's db, nemesis worker and phase source.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from checkers.api import CheckerResult
from checkers.audit import load_timeline
from checkers.compose import Result, check, load_run, write_results
from checkers.node_logs import load_logs
from checkers.sim import load_sim_report
from harness import plan as plans
from harness.backends.base import Backend, NodeHandle
from harness.backends.lifecycle import managed_cluster
from harness.clock_offsets import OffsetRecorder, local_boot_id
from harness.control import Control, ControlError
from harness.db import CONTROL_PLANE_WORKLOADS, DB, EmberDB
from harness.dbs import PhaseSource, System, first_line, register_keys
from harness.dbs.registry import SYSTEMS
from harness.history_writer import HistoryWriter
from harness.interpreter import Interpreter
from harness.process_db import DBError, Gone
from harness.progress import RunStatus
from harness.runlog import FILE_NAME as HARNESS_LOG
from harness.runlog import harness_log
from harness.store import RunDir, new_run
from harness.version import stamp
from nemesis import journal
from nemesis.generator import NemesisSchedule, fit_targets
from nemesis.schedule import SLOW_RATE_KBIT, NemesisWorker
from workloads.generator import Generator, Once, Op, Seq, Stagger, TimeLimit
from workloads.register import register_ops

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN = 0, 1, 2
HEALTHY_TIMEOUT_S = 90.0
WORKLOADS = SYSTEMS["ember"].workloads  # the default db's (`faultline run --db ember`)


class RunError(RuntimeError):
    """The run could not be carried out (one line for the user)."""


class RunNotStartedError(RunError):
    """The run could not start: nothing was written to the store."""


@dataclass(slots=True)
class _RunHome:
    """The run's directory, made on first `make()` (once the cluster is up)."""

    root: Path
    plan: plans.Plan
    started: float
    run: RunDir | None = None

    def make(self) -> RunDir:
        if self.run is None:
            self.run = new_run(self.root, self.plan.name, self.plan.seed, self.started)
            self.run.plan.write_bytes(plans.dump(self.plan))
        return self.run


@dataclass(slots=True)
class RunOutcome:
    """Where the run went and what it found."""

    run: RunDir
    result: Result
    exit_code: int
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why the run could not be carried out
    report: Path | None = None  # report.html, once rendered


def exit_code(result: Result) -> int:
    """0 valid, 1 invalid, 2 unknown (DESIGN.md)."""
    if result.valid is True:
        return EXIT_VALID
    return EXIT_INVALID if result.valid is False else EXIT_UNKNOWN


def error_result(plan: plans.Plan, reason: str) -> Result:
    """The verdict of a run that could not be judged."""
    error = CheckerResult(name="run", valid="unknown", error=reason)
    return Result(valid="unknown", checkers={"run": error}, reasons=[f"run: {reason}"],
                  test=plan.name, seed=plan.seed)  # fmt: skip


@dataclass(slots=True)
class _Parts:
    """What the async part of a run needs."""

    plan: plans.Plan
    nodes: list[NodeHandle]
    control: Control
    system: System[Any]
    db: Any  # the system's DB (`System[D]` types its callables against it)
    run: RunDir
    status: RunStatus
    log: Callable[[str], None]
    # The simulator brings its own nemesis worker and phase source (harness.simrun).
    nemesis_worker: Any = None
    phase_source: Callable[[Callable[[dict[str, Any]], None]], PhaseSource] | None = None


def _generators(
    plan: plans.Plan, system: System[Any], db: Any, admin: bool, nemesis: bool
) -> dict[str, Generator]:
    """The main phase's generator per thread kind, every one seeded from the plan."""
    t = plan.time_limit_s
    gens: dict[str, Generator] = {
        "client": TimeLimit(
            t,
            Stagger(
                1.0 / plan.rate_hz,
                register_ops(plan.rng("register"), register_keys(plan)),
                plan.rng("register-timing"),
            ),
        )
    }
    if admin:
        change = system.change_generator(plan, db)
        interval = float(plan.options.get("change_interval_s", 3.0))
        gens["admin"] = TimeLimit(t, Stagger(interval, change, plan.rng("change-timing")))
    if nemesis:
        gens["nemesis"] = NemesisSchedule(
            plan.rng("nemesis"), list(plan.nemesis),
            mode=str(plan.options.get("nemesis_mode", "both")),
            gap_s=float(plan.options.get("nemesis_gap_s", 6.0)), end_s=t,
            phases=plan.options.get("nemesis_phases"),
            only=plan.options.get("nemesis_kinds"), keep=plan.options.get("nemesis_keep"),
            targets=plan.options.get("nemesis_targets"),
            groupings=plan.options.get("nemesis_groupings"), roles=system.plan_roles(plan),
            clocks=clocks_movable(plan), maintenance=getattr(db, "maintenance", ()),
            mix_maintenance=system.maintenance_in_mix,
        )  # fmt: skip
    return system.generators(plan, db, gens)


async def _drive(p: _Parts, writer: HistoryWriter) -> list[str]:
    """Steps 4-5 of the module doc; returns notes for the report."""
    admin = "change-peers" in p.plan.workload
    nemesis = bool(p.plan.nemesis)
    lasting = fault_failpoints(p.plan)
    heals = nemesis or bool(lasting)
    nem = (p.nemesis_worker or NemesisWorker(p.control, p.nodes, p.db)) if heals else None
    if nem is not None:
        nem.failpoints_tried.update(lasting)  # heal-all switches them off with its own
    kinds, workers, clients = p.system.workers(p.plan, p.db, p.control, nem)
    notes: list[str] = []

    offsets: OffsetRecorder | None = None

    def on_event(e: dict[str, Any]) -> None:
        if offsets is not None and e["kind"] == "nemesis":
            offsets.after(e["f"], e["type"])
        if e["kind"] == "client":
            setattr(p.status, e["type"], getattr(p.status, e["type"]) + 1)
        elif e["kind"] == "admin":
            p.status.changes[e["type"]] = p.status.changes.get(e["type"], 0) + 1
        nem = workers.get("nemesis")
        if isinstance(nem, NemesisWorker):
            p.status.faults = sorted(nem.active)

    interp = Interpreter(kinds, workers, writer, on_event=on_event)
    # Audit events carry the nodes' wall clock: this anchors it to the history's zero
    # (the interpreter's clock starts now), so the report places them where they happened.
    # Nodes on this kernel (Docker) or in the simulator share our monotonic clock:
    # its reading places their events even while a clock fault moves their wall
    # clocks (checkers.audit.place_events). SSH hosts have clocks of their own: each
    # node's offset is measured now and after every restart (harness.clock_offsets).
    # Whether they do is read, not assumed: every node's kernel boot id is ours.
    anchor = {"history_zero_wall": time.time(), "history_zero_mono_ns": time.monotonic_ns(),
              "shared_monotonic": False, "harness_boot_id": local_boot_id()}  # fmt: skip
    # The simulator's processes all read the loop's one clock: there is no
    # offset to measure (and no shell to read one through).
    measured = [] if p.plan.backend == "sim" else [n.name for n in p.nodes]
    offsets = OffsetRecorder(p.control, measured, p.run.timeline, anchor)
    offsets.measure_all("start")
    anchor["shared_monotonic"] = p.plan.backend == "sim" or (
        p.plan.backend == "docker" and offsets.same_kernel()
    )
    offsets.write()

    def on_phase(obs: dict[str, Any]) -> None:
        interp.observe("phase", obs)

    watcher: PhaseSource = (
        p.phase_source(on_phase)
        if p.phase_source is not None
        else p.system.phase_watcher(p.db, p.control, [n.name for n in p.nodes], on_phase)
    )
    watcher.start()
    p.status.stages = watcher.stages
    try:
        p.status.stage = "running"
        main_phase = _generators(p.plan, p.system, p.db, admin, nemesis)
        await interp.run(main_phase)
        schedule = main_phase.get("nemesis")
        if isinstance(schedule, NemesisSchedule) and (idle := schedule.idle()):
            notes.append(idle)
        if heals:
            p.status.stage = "healing"
            await interp.run({"nemesis": Once(Op(f="heal-all"))})
            method = workers["nemesis"].slow_method  # type: ignore[attr-defined]
            if method:
                notes.append(f"slow catch-up used {method}")
        p.status.stage = "recovering"
        names = [n.name for n in p.nodes]
        try:
            await wait_healthy(p.db, names, HEALTHY_TIMEOUT_S, exit_watch(p.db, p.control))
        except DBError as exc:
            notes.append(f"after healing: {exc}")
        offsets.join()
        await asyncio.to_thread(offsets.measure_all, "end")
        notes += [f"clock offset not measured: {e}" for e in offsets.errors]
        p.status.stage = "quiet"
        await asyncio.sleep(p.plan.quiet_s)
        p.status.stage = "final reads"
        reads: Generator = Seq([Once(op) for op in p.system.final_reads(p.plan)])
        await interp.run({"client": reads})
        closing = p.system.closing(main_phase)
        if closing:
            p.status.stage = "closing"
            await interp.run(closing)
        notes += await report_applied(p.db, names)
    finally:
        watcher.stop()
        for c in clients:
            await c.close()
    return notes


async def wait_healthy(db: Any, names: list[str], timeout_s: float, gone: Gone | None) -> None:
    """The db's own async wait where it has one (the simulator's), else its blocking one."""
    wait = getattr(db, "wait_healthy_async", None)
    if wait is not None:
        await wait(names, timeout_s)
    else:
        await asyncio.to_thread(db.wait_healthy, names, timeout_s, gone)


async def report_applied(db: Any, names: list[str]) -> list[str]:
    """Has a db that can (ember) write its replicas' end states to the audit
    logs before they are collected; notes naming the nodes that did not."""
    report = getattr(db, "report_applied_async", None)
    if report is not None:
        missing = await report(names)
    elif hasattr(db, "report_applied"):
        missing = await asyncio.to_thread(db.report_applied, names)
    else:
        return []
    return [f"{n} did not report its applied state at the end: replicas compared at "
            f"their last periodic report" for n in missing]  # fmt: skip


def _system(plan: plans.Plan) -> System[Any]:
    """The plan's registry entry (a replayed plan may name a db this tree lacks)."""
    system = SYSTEMS.get(plan.db)
    if system is None:
        raise RunError(f"unknown db {plan.db!r}; expected one of {', '.join(SYSTEMS)}")
    return system


def _cluster_backend(plan: plans.Plan, system: System[Any], log: Callable[[str], None],
                     status: RunStatus, keep: bool) -> Backend:  # fmt: skip
    if plan.backend == "ssh":
        from harness.backends.ssh import SshBackend

        hosts = plan.options.get("hosts")
        if not hosts:
            raise RunError("--backend ssh needs --hosts FILE (one node a line)")
        return SshBackend.from_file(Path(str(hosts)))
    from harness.backends.docker import DockerBackend

    name = f"run{plan.seed % 100_000}-{os.getpid()}"
    image = system.image(log)
    volumes = (system.data_dir,) if system.data_dir else ()
    return DockerBackend(name, size=len(plan.nodes), image=image, on_step=status.doing_now,
                         keep=keep, volumes=volumes)  # fmt: skip


def _execute(plan: plans.Plan, home: _RunHome, status: RunStatus, log: Callable[[str], None],
             leave_running: bool) -> list[str]:  # fmt: skip
    system = _system(plan)
    status.stage = "image" if plan.backend == "docker" else "hosts"

    def setup_log(message: str) -> None:
        status.doing_now(message)  # the live line says which layer is building
        log(message)

    backend = _cluster_backend(plan, system, setup_log, status, leave_running)
    status.stage = "cluster up"
    status.doing_now(f"checking ssh to {', '.join(plan.nodes)}")
    record = journal.Journal()
    with journal.recording(record), contextlib.ExitStack() as logs, \
            managed_cluster(backend, leave_running=leave_running) as (nodes, control):  # fmt: skip
        run = home.make()
        logs.enter_context(harness_log(run.path / HARNESS_LOG))
        record.open(run.path / journal.FILE_NAME, running_dir=home.root / journal.RUNNING_DIR)
        record.start(plan.backend, getattr(backend, "name", None), nodes)
        # Clock faults move ember's clock through an offset file (nemesis.clock).
        clock = {"clock_faults": True} if clock_faults_possible(plan) else {}
        db = system.make_db(nodes, {**plan.db_settings, **clock}, plan.seed)
        names = [n.name for n in nodes]
        status.stage = "db start"
        _hook(db, "configure", plan)
        status.doing_now(f"installing {db.name} on {', '.join(names)}")
        db.install(control)
        # From here on the nodes have logs: a db that never became healthy,
        # or refused its setup, leaves them in the run as the evidence.
        try:
            status.doing_now(f"starting {db.name} on {', '.join(names)}")
            db.start(control, names)
            status.doing_now(f"waiting for {', '.join(names)} to be healthy")
            db.wait_healthy(names, HEALTHY_TIMEOUT_S, gone=exit_watch(db, control))
            status.doing_now(f"setting up {db.name} for {'+'.join(plan.workload)}")
            _hook(db, "setup", plan)
            log(f"{db.name} healthy on {', '.join(n.name for n in nodes)}")
            notes = _failpoints(plan, db, [n.name for n in nodes], log)
            status.doing_now("")
            p = _Parts(plan, nodes, control, system, db, run, status, log)
            with HistoryWriter(run.history) as writer:
                notes += asyncio.run(_drive(p, writer))
        finally:
            status.stage = "collecting logs"
            missing = db.collect(control, [n.name for n in nodes], run)
            if leave_running:
                log(f"cluster left running: {backend.nodes or nodes}")
    return notes + [f"could not collect {m}" for m in missing]


def exit_watch(db: Any, control: Control) -> Gone | None:
    """The db's own check for processes that exited, bound to the cluster's
    control; None for a db without one (the simulator's)."""
    exited = getattr(db, "exited", None)
    if exited is None:
        return None
    return lambda down: exited(control, down)


def _hook(db: Any, name: str, plan: plans.Plan) -> None:
    """A DB's optional step, given the plan's workloads: `configure` (before
    install: e.g. ember's control plane for the workloads that need it) and
    `setup` (after the first healthy: e.g. ember's zone)."""
    step = getattr(db, name, None)
    if callable(step):
        step(plan.workload)


def _failpoints(
    plan: plans.Plan, db: DB, names: list[str], log: Callable[[str], None]
) -> list[str]:
    """Switch on the plan's `failpoints` option ({name: params}) on every node."""
    notes = []
    lasting = fault_failpoints(plan)
    for name, params in dict(plan.options.get("failpoints") or {}).items():
        for node in names:
            db.set_failpoint(node, str(name), dict(params or {}))
        until = "the heal-all before the quiet period" if name in lasting else "the end"
        notes.append(f"failpoint {name} {params or {}} on every node from the start to {until}")
        log(notes[-1])
    return notes


def fault_failpoints(plan: plans.Plan) -> list[str]:
    """The plan's from-the-start failpoints that are faults, not planted defects
    (ember.failpoints.PLANTED): healed with the rest at the main phase's end,
    so the quiet period is quiet. raft.message.drop on to the end left a group
    leaderless at the end and the final reads unanswered, which the liveness
    rules called invalid (sim seeds 61 and 65); a planted defect stays on."""
    from ember.failpoints import PLANTED

    return sorted(str(n) for n in plan.options.get("failpoints") or {} if n not in PLANTED)


def clocks_movable(plan: plans.Plan) -> bool:
    """Whether a clock fault can move this plan's node clocks: ember's, in the
    simulator, or on Docker and SSH hosts following the offset file the
    nemesis writes (ember/clock.py); etcd follows no such file."""
    return plan.db == "ember" and plan.backend in ("docker", "sim", "ssh")


def clock_faults_possible(plan: plans.Plan) -> bool:
    """Whether the schedule may draw a clock fault (named, or mixed into `mix`)."""
    named = "clock" in plan.nemesis
    return named or ("mix" in plan.nemesis and clocks_movable(plan))


def nemesis_fit(plan: plans.Plan) -> list[str]:
    """What the plan's nemesis aims at instead on this db, if it must adapt
    (`nemesis.generator.fit_targets`); PlanError when it could apply nothing."""
    system = SYSTEMS.get(plan.db)
    if system is None or not plan.nemesis:
        return []  # an unknown db is refused with its own message later
    if "clock" in plan.nemesis and not clocks_movable(plan):
        raise plans.PlanError(
            f"--nemesis clock needs ember: it moves a node's clock through an offset file "
            f"ember follows ({plan.db} follows no such file)"
        )
    if "drop-replies" in plan.nemesis and not getattr(system.make_db, "has_failpoints", True):
        raise plans.PlanError(
            f"--nemesis drop-replies needs ember: it loses answers through ember's "
            f"http.drop-reply failpoint ({plan.db} has no failpoints)"
        )
    if "compact-kill" in plan.nemesis:
        why = compact_kill_refusal(plan, system)
        if why:
            raise plans.PlanError(why)
    try:
        note = fit_targets(plan.nemesis, plan.options.get("nemesis_targets"),
                           system.plan_roles(plan), system.roles_named(plan))  # fmt: skip
    except ValueError as exc:
        raise plans.PlanError(str(exc)) from None
    notes = [note] if note else []
    if "mix" in plan.nemesis and not clocks_movable(plan):
        notes.append(f"nemesis on {plan.db}: mix draws no clock faults (it cannot move its clocks)")
    kinds = plan.options.get("nemesis_kinds") or ("slow",)
    slows = "slow" in kinds and any(k in ("slow", "mix") for k in plan.nemesis)
    if slows and plan.backend != "sim" and not getattr(system.make_db, "has_failpoints", True):
        notes.append(f"nemesis on {plan.db}: slow catch-up delays the target's links with "
                     f"netem where the kernel has it, else rate-limits them to "
                     f"{SLOW_RATE_KBIT} kbit ({plan.db} has no failpoints)")  # fmt: skip
    return notes


def traffic_notes(plan: plans.Plan) -> list[str]:
    """What the plan's metastore traffic kinds will not send: none at all
    when it runs no metastore workload. `faultline run` refuses that; an
    explore's swarm draw or a shrunk plan may leave the workload out while
    the option stays, and the run says so rather than seem to have sent it."""
    kinds = plan.options.get("meta_traffic")
    if not kinds or "metastore" in plan.workload:
        return []
    return [f"--meta-traffic {','.join(kinds)}: none sent, the plan runs no metastore workload"]


def compact_kill_refusal(plan: plans.Plan, system: System[Any]) -> str | None:
    """Why this plan's db cannot take a compact-kill (None: it can): the db
    has nothing to compact, or ember runs without its metastore."""
    if not getattr(system.make_db, "maintenance", ()):
        return f"--nemesis compact-kill: {plan.db} has no compaction to time a kill by"
    if plan.db == "ember" and not EmberDB.runs_control_plane(plan.workload, plan.db_settings):
        return (
            "--nemesis compact-kill on ember compacts its metastore, which runs only with "
            f"a {', '.join(sorted(CONTROL_PLANE_WORKLOADS))} workload or the meta_nodes "
            "setting"
        )
    return None


def judge(plan: plans.Plan, run: RunDir, notes: list[str]) -> Result:
    """Run the checkers on the store's files and write results.json."""
    plan_doc, history, audit, _ = load_run(run.path)
    # The anchor of the audit events on the history's clock (the time rules).
    options = {"history_zero_wall": load_timeline(run.path)}
    result = check(plan_doc, history, options, audit=audit, sim=load_sim_report(run.path),
                   logs=load_logs(run.path))  # fmt: skip
    result.reasons.extend(f"note: {n}" for n in notes)
    write_results(result, run.path)
    return result


def run(
    plan: plans.Plan,
    store_root: Path,
    *,
    status: RunStatus | None = None,
    log: Callable[[str], None] = lambda _m: None,
    leave_running: bool = False,
) -> RunOutcome:
    """Carry out one run of `plan` (see the module doc)."""
    plans.validate(plan)
    fitted = nemesis_fit(plan) + traffic_notes(plan)  # before anything starts: refused or said
    for note in fitted:
        log(note)
    # A replayed plan carries the version it ran with; record this one's.
    plan = msgspec.structs.replace(plan, options=stamp(plan.options))
    home = _RunHome(store_root, plan, time.time())
    status = status or RunStatus()
    status.time_limit_s = plan.time_limit_s
    try:
        if plan.backend == "sim":
            from harness.simrun import execute_sim

            notes = execute_sim(plan, home.make(), status, log)
        else:
            notes = _execute(plan, home, status, log, leave_running)
    except (RunError, DBError, ControlError, OSError, RuntimeError, ValueError) as exc:
        # Docker unreachable, image build failed, an SSH host down, a bad
        # hosts file: the run never started, and says so in one line. Once
        # it has a run dir (ember not starting, a node lost): one line, the
        # run kept as evidence.
        reason = _describe(exc)
        if home.run is None:
            raise RunNotStartedError(reason) from exc
        run_dir = home.run
        result = error_result(plan, reason)
        write_results(result, run_dir.path)
        outcome = RunOutcome(run_dir, result, EXIT_UNKNOWN, error=reason)
        return publish(outcome, store_root, log)
    notes = fitted + notes
    run_dir = home.make()
    status.stage = "checking"
    result = judge(plan, run_dir, notes)
    status.stage = "reporting"
    return publish(RunOutcome(run_dir, result, exit_code(result), notes), store_root, log)


def publish(outcome: RunOutcome, store_root: Path, log: Callable[[str], None]) -> RunOutcome:
    """Render the run's report.html and refresh the store's index.html.

    A report that cannot be drawn never costs the run its verdict: the
    failure is logged and the outcome returned without a report path.
    """
    from reports.index import write_index
    from reports.render import write_report

    try:
        outcome.report = write_report(outcome.run.path)
        write_index(store_root)
    except Exception as exc:  # the verdict is already on disk; keep it
        log(f"report not rendered: {type(exc).__name__}: {exc}")
    return outcome


_describe = first_line
