"""`faultline explore` and `faultline shrink`.

    faultline explore --budget 10m --workers 2 [--keep-going] [plan flags]
    faultline shrink store/ember-mix/20260101T000000-42 [--workers 2]

`explore` plays seeds of a plan in the simulator, in parallel worker
processes, each seed with its own swarm selection of fault kinds, phases,
roles and workloads, steered toward coverage cells no run has hit yet
(`harness.explore`, `harness.coverage`). It stops at the first run that is
not valid (unless `--keep-going`) and prints that run's seed, replay and
shrink commands first. `shrink` cuts a failing simulated run down to the
faults, workloads and time its failure needs (`harness.shrink`) and writes
a plan file `faultline run --plan FILE` replays.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import multiprocessing
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.live import Live
from rich.table import Table

from harness import plan as plans
from harness.cli import CliError
from harness.commands_run import _positive, add_plan_flags, plan_from_args, run_plan
from harness.coverage import Cell, Coverage
from harness.dbs.registry import SYSTEMS
from harness.explore import RunSummary, Space, choose, explored_plan, play
from harness.shrink import MAX_RUNS, Shrinker, Step
from harness.shrink_inputs import ShrinkError, emitted_numbers, onset_of, summary_of, target_of
from harness.store import DEFAULT_ROOT
from nemesis.journal import owner, owner_state

COVERAGE_FILE = Path("explore") / "coverage.json"
# Off a terminal (a nightly's log, nohup) the live table cannot redraw, so a
# plain tally line is printed this often instead of nothing until the end.
PLAIN_EVERY_S = 30.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parse_budget(text: str) -> tuple[float | None, int | None]:
    """`10m`, `90s`, `1h` -> (seconds, None); `1000 runs` or `1000` -> (None, 1000)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|runs?)?\s*", text)
    if m is None or float(m.group(1)) <= 0:
        raise CliError(
            f"--budget {text!r}: expected a duration (90s, 10m, 1h) or a run count (1000 runs)"
        )
    value, unit = float(m.group(1)), m.group(2)
    if unit in (None, "run", "runs"):
        if not value.is_integer():
            raise CliError(f"--budget {text!r}: a run count is a whole number")
        return None, int(value)
    return value * {"s": 1, "m": 60, "h": 3600}[unit], None


def _pool(workers: int, scratch: Path) -> ProcessPoolExecutor:
    """Workers that play runs; their temporary files go under `scratch`
    (`_scratch_root`), which the caller removes once the pool is down."""
    # spawn: the parent may have threads (rich's refresher); a fork would copy their locks.
    return ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_start, initargs=(os.getpid(), str(scratch)),
    )  # fmt: skip


SCRATCH_PREFIX = "faultline-workers-"


def _scratch_root() -> Path:
    """One directory for every temporary file the workers make (each run's
    scratch, the simulator's disks). A killed worker's `finally` never runs,
    and the workers are killed whenever explore or shrink stops early, so
    their leftovers are removed with this directory by the parent, which
    also removes the directories of earlier parents that were SIGKILLed (its
    name carries the parent's pid and start time: `nemesis.journal`'s owner)."""
    for old in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        pid, _, rest = old.name.removeprefix(SCRATCH_PREFIX).partition("-")
        started = rest.partition("-")[0]
        if pid.isdigit() and owner_state(socket.gethostname(), int(pid), started) == "dead":
            shutil.rmtree(old, ignore_errors=True)
    me = owner()
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{me['pid']}-{me['started']}-"))


def _worker_start(parent: int, scratch: str) -> None:
    _die_with_parent(parent)
    tempfile.tempdir = scratch


def _die_with_parent(parent: int) -> None:
    """Worker start-up: end when the explore or shrink that started it ends,
    however it ends (a SIGKILLed parent cannot shut its pool down, and an
    orphaned worker would play its seed to the end and then wait forever)."""
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: the pool is shut down


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the workers' runs now instead of waiting for them to finish."""
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.kill()


def _verdict(s: RunSummary) -> str:
    return (
        {True: "valid", False: "invalid"}.get(s.valid, "unknown")
        if isinstance(s.valid, bool)
        else "unknown"
    )


class _Tally:
    def __init__(self, coverage: Coverage, reachable: list[Cell]) -> None:
        self.started = time.monotonic()
        self.runs = 0
        self.sim_s = 0.0
        self.verdicts = {"valid": 0, "invalid": 0, "unknown": 0}
        self.coverage = coverage
        # The cells this explore's plan can hit: the table also keeps cells
        # other explores of the store could (other kinds, phases, targets).
        self.reachable = reachable

    def reached(self) -> str:
        return f"{self.coverage.hit_among(self.reachable)}/{len(self.reachable)}"

    def never_hit(self, most: int = 12) -> str | None:
        """The reachable cells no run has hit yet, as one line (the first `most`),
        or None: where the next hunt should aim (--nemesis-phases, a target)."""
        unhit = self.coverage.unhit_among(self.reachable)
        if not unhit:
            return None
        shown = ", ".join("/".join(c) for c in unhit[:most])
        more = f" and {len(unhit) - most} more" if len(unhit) > most else ""
        return f"explore: never hit (kind/phase/role): {shown}{more}"

    def add(self, s: RunSummary) -> None:
        self.runs += 1
        self.sim_s += s.sim_s
        self.verdicts[_verdict(s)] += 1
        self.coverage.add(s.cells)

    def line(self) -> str:
        """The table's figures as one plain line, for logs."""
        wall = max(time.monotonic() - self.started, 1e-9)
        return (
            f"explore: {wall:.0f} s, {self.runs} runs ({self.runs / wall:.2f}/s, "
            f"{self.sim_s / wall:.1f} simulated s/s): {self.verdicts['valid']} valid, "
            f"{self.verdicts['invalid']} invalid, {self.verdicts['unknown']} unknown; "
            f"coverage {self.reached()} reachable cells"
        )

    def render(self) -> Table:
        wall = max(time.monotonic() - self.started, 1e-9)
        t = Table(show_header=True, header_style="bold", box=None)
        for col in ("runs", "runs/s", "sim s/s", "valid", "invalid", "unknown", "coverage"):
            t.add_column(col, justify="right")
        t.add_row(
            str(self.runs),
            f"{self.runs / wall:.2f}",
            f"{self.sim_s / wall:.1f}",
            *(str(self.verdicts[k]) for k in ("valid", "invalid", "unknown")),
            f"{self.reached()} reachable cells",
        )
        return t


def _explore_cmd(args: argparse.Namespace) -> int:
    if args.backend != "sim":
        raise CliError(
            "explore plays seeds in the simulator (--backend sim); a Docker run "
            "takes minutes: replay what explore finds with faultline run --plan"
        )
    seconds, max_runs = parse_budget(args.budget)
    base = plan_from_args(args)
    traffic = next(w for w in base.workload if w in SYSTEMS[base.db].traffic)
    workers = args.workers or os.cpu_count() or 1
    cov_path = args.store / COVERAGE_FILE
    try:
        coverage = Coverage.load(cov_path)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    tally = _Tally(coverage, Space.of(base).cells())
    console = Console()
    print(
        f"explore: seeds from {base.seed}, {workers} workers, budget {args.budget}, "
        f"swarm {'on' if args.swarm else 'off'}, steering {'on' if args.steer else 'off'}",
        flush=True,
    )
    found: list[RunSummary] = []
    next_seed, stop = base.seed, False
    running: dict[Future[RunSummary], int] = {}

    def submit(pool: ProcessPoolExecutor) -> None:
        nonlocal next_seed
        swarm = (
            choose(next_seed, base, traffic, coverage if args.steer else None)
            if args.swarm
            else None
        )
        plan = explored_plan(base, next_seed, swarm)
        running[pool.submit(play, plans.dump(plan), str(args.store))] = next_seed
        next_seed += 1

    def budget_left() -> bool:
        if max_runs is not None and next_seed - base.seed >= max_runs:
            return False
        return seconds is None or time.monotonic() - tally.started < seconds

    scratch = _scratch_root()
    pool = _pool(workers, scratch)
    before = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        live = (
            None
            if args.no_progress or not console.is_terminal
            else Live(tally.render(), console=console, refresh_per_second=2)
        )
        plain = not args.no_progress and live is None
        last_line = time.monotonic()
        with live or contextlib.nullcontext():
            while not stop:
                while len(running) < workers and budget_left():
                    submit(pool)
                if not running:
                    break
                done, _ = wait(list(running), PLAIN_EVERY_S, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: running[f]):  # seed order
                    del running[fut]
                    summary = fut.result()
                    tally.add(summary)
                    if summary.valid is not True:
                        found.append(summary)
                        _report_found(summary)
                        stop = stop or not args.keep_going
                if live is not None:
                    live.update(tally.render())
                elif plain and time.monotonic() - last_line >= PLAIN_EVERY_S:
                    print(tally.line(), flush=True)
                    last_line = time.monotonic()
    except KeyboardInterrupt:
        print("explore: interrupted; runs in flight are dropped")
        _stop_workers(pool)
    finally:
        for fut in running:
            fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, before)  # a caller in-process keeps its own
        shutil.rmtree(scratch, ignore_errors=True)
        cov_path.parent.mkdir(parents=True, exist_ok=True)
        cov_path.write_bytes(coverage.dump())
    wall = time.monotonic() - tally.started
    print(
        f"explore: {tally.runs} runs in {wall:.0f} s ({tally.runs / max(wall, 1e-9):.2f}"
        f" runs/s, {tally.sim_s / max(wall, 1e-9):.1f} simulated s/s): "
        f"{tally.verdicts['valid']} valid, {tally.verdicts['invalid']} invalid, "
        f"{tally.verdicts['unknown']} unknown; coverage {tally.reached()} cells this plan "
        f"can reach ({coverage.hit}/{coverage.total} of every kind, phase and role in "
        f"{cov_path})",
        flush=True,
    )
    unhit = tally.never_hit()
    if unhit is not None:
        print(unhit, flush=True)
    if any(s.valid is False for s in found):
        return 1
    return 2 if found else 0


def _report_found(s: RunSummary) -> None:
    what = ", ".join(f"{c} ({r})" for c, r in s.failures) or (s.error or "unknown verdict")
    print(f"seed {s.seed}: {_verdict(s).upper()}: {what}", flush=True)
    if s.run_dir:
        quoted = shlex.quote(s.run_dir)
        print(f"  replay: faultline replay {quoted}", flush=True)
        if s.valid is False:
            print(f"  shrink: faultline shrink {quoted}", flush=True)
        print(f"  report: {s.run_dir}/report.html", flush=True)


def _shrink_cmd(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    plan = run_plan(run_dir)
    try:
        if plan.backend != "sim":
            raise ShrinkError(
                f"{run_dir} ran on {plan.backend}; shrink plays candidates in the simulator. "
                f"Run its plan there first (faultline run --plan {run_dir}/test.json "
                "--backend sim) and shrink that run if it fails"
            )
        target = target_of(run_dir)
        start = summary_of(run_dir, plan)
    except ShrinkError as exc:
        raise CliError(str(exc)) from None
    store = args.store or run_dir.resolve().parent.parent
    started = time.monotonic()
    faults = start.fault_kinds
    print(
        f"shrink: keeping {target[0]} ({target[1]}); {len(faults)} faults, workloads "
        f"{'+'.join(plan.workload)}, {plan.time_limit_s:g} s, {start.ops} ops; "
        f"at most {args.max_runs} runs",
        flush=True,
    )

    def on_run(s: RunSummary, kept: bool) -> None:
        if args.no_progress:  # the steps and the outcome still print: they are the result
            return
        print(
            f"  run {shrinker.runs}: {len(s.fault_kinds)} faults, {s.ops} ops: "
            f"{'still fails' if kept else 'passes or differs'} ({s.wall_s:.0f} s)",
            flush=True,
        )

    def on_step(step: Step) -> None:
        print(
            f"step {step.name}: {'kept' if step.kept else 'no change'}: {step.note} "
            f"({step.candidates} candidates, {step.runs} new runs)",
            flush=True,
        )

    workers_scratch = _scratch_root()
    pool = _pool(args.workers or os.cpu_count() or 1, workers_scratch)
    scratch = workers_scratch / "candidates"  # the failing candidates' run dirs
    before = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        shrinker = Shrinker(plan, target, pool, scratch, start, on_run, on_step, args.max_runs,
                            onset_s=onset_of(run_dir, target))  # fmt: skip
        small = shrinker.shrink()
        small = msgspec.structs.replace(
            small, options={**small.options, "expect": {"checker": target[0], "rule": target[1]}}
        )
        out = args.out or run_dir / "shrunk.json"
        out.write_bytes(plans.dump(small))
        log_path = out.with_name(out.stem + "-log.json")
        log_path.write_bytes(msgspec.json.format(msgspec.json.encode(shrinker.log())) + b"\n")
        final = pool.submit(play, plans.dump(small), str(store), True).result()
    except KeyboardInterrupt:
        _stop_workers(pool)
        raise CliError("shrink: interrupted before it finished") from None
    except ShrinkError as exc:
        raise CliError(str(exc)) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        signal.signal(signal.SIGTERM, before)
        shutil.rmtree(workers_scratch, ignore_errors=True)
    kept = emitted_numbers(small, len(final.fault_kinds))
    print(
        f"shrunk: faults {len(faults)} -> {len(final.fault_kinds)} "
        f"({', '.join(final.fault_kinds) or 'none'}: numbers {kept} of its schedule), workloads "
        f"{len(plan.workload)} -> {len(small.workload)} ({'+'.join(small.workload)}), "
        f"time {plan.time_limit_s:g} -> {small.time_limit_s:g} s, rate {plan.rate_hz:g} -> "
        f"{small.rate_hz:g} Hz, clients {plan.concurrency} -> {small.concurrency}, ops "
        f"{start.ops} -> {final.ops}; {shrinker.runs} runs in "
        f"{time.monotonic() - started:.0f} s (log: {log_path})"
    )
    still = target in final.failures
    print(
        f"check: the shrunk plan {'still fails' if still else 'NO LONGER FAILS'} with "
        f"{target[0]} ({target[1]}): {final.run_dir}"
    )
    print(f"plan: {out}")
    print(f"replay: faultline run --plan {shlex.quote(str(out))} --backend sim")
    print(f"docker: faultline run --plan {shlex.quote(str(out))} --backend docker --attempts 5")
    return 1 if still else 2


def add_parser(subparsers: Any) -> None:
    """Registers `faultline explore` and `faultline shrink`."""
    e = subparsers.add_parser(
        "explore",
        help="swarm simulated seeds of a plan, steered by "
        "coverage, until a run fails or the budget ends",
    )
    add_plan_flags(e, default_backend="sim")
    e.add_argument("--seed", type=int, help="first seed (default: random, printed first)")
    e.add_argument(
        "--workers", type=_positive(int, "--workers"), help="worker processes (default: every core)"
    )
    e.add_argument(
        "--budget",
        default="10m",
        help="a duration (90s, 10m, 1h) or a run count (1000 runs); default 10m",
    )
    e.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    e.add_argument(
        "--no-swarm", dest="swarm", action="store_false", help="every seed runs the plan's full mix"
    )
    e.add_argument(
        "--no-steer",
        dest="steer",
        action="store_false",
        help="do not bias seeds toward coverage cells not yet hit",
    )
    e.set_defaults(func=_explore_cmd, store=DEFAULT_ROOT)
    s = subparsers.add_parser(
        "shrink",
        help="cut a failing simulated run down to the faults, workloads and time its failure needs",
    )
    s.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    s.add_argument(
        "--workers", type=_positive(int, "--workers"), help="worker processes (default: every core)"
    )
    s.add_argument("--out", type=Path, help="plan file to write (default RUN_DIR/shrunk.json)")
    s.add_argument("--store", type=Path, help="where the shrunk run goes (default: the run's)")
    s.add_argument(
        "--max-runs",
        type=_positive(int, "--max-runs"),
        default=MAX_RUNS,
        help=f"most candidate runs the search plays (default {MAX_RUNS})",
    )
    s.add_argument(
        "--no-progress", action="store_true", help="no line per candidate run (steps still print)"
    )
    s.set_defaults(func=_shrink_cmd)
