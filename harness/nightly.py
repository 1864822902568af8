"""`faultline nightly`: a matrix of runs, one after another, into JUnit XML.

Theory of operation. A TOML matrix names workloads x nemeses x seeds x
cluster sizes plus a backend, a per-run time limit and a global time budget.
Each cell runs as a SUBPROCESS (`faultline run ...`, or the matrix's
`command`), so a run that crashes, hangs or exhausts memory takes only itself
down: its exit code, the run dir it left (found by diffing the store before
and after) and that dir's results.json give its outcome:

    results.json valid true  -> passed         valid false -> failed
    valid "unknown"          -> unknown        no verdict / crash / timeout -> error

Cells the budget has no time left for are recorded as skipped. The night
writes one JUnit test case per cell (failures carry the verdict, anomaly
summary and replay command) and prints a summary table. Exit code: 1 if any
run failed, else 2 if any was unknown or errored, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from harness.plan import BACKENDS
from harness.store import RunDir, iter_runs

PASSED, FAILED, UNKNOWN, ERROR, SKIPPED = "passed", "failed", "unknown", "error", "skipped"
# How much longer than its time limit a run may take (setup, checking) before it is killed.
DEFAULT_GRACE_S = 120.0
_TAIL_CHARS = 2000
# How long a run past its time gets to unwind after SIGTERM (heal, remove
# its containers) before its session is killed.
TERM_GRACE_S = 60.0


class MatrixError(ValueError):
    """A matrix file that cannot be read or describes no valid night."""


@dataclass(frozen=True)
class Matrix:
    """A parsed nightly matrix (the TOML file, validated)."""

    backend: str
    workloads: tuple[str, ...]
    nemeses: tuple[str, ...]
    seeds: tuple[int, ...]
    nodes: tuple[int, ...]
    time_limit_s: float
    budget_s: float
    store: Path
    junit: Path
    command: tuple[str, ...] = ("faultline", "run")
    grace_s: float = DEFAULT_GRACE_S
    extra_args: tuple[str, ...] = ()
    # Each cell explores (`faultline explore --budget ...`) instead of one run.
    explore_budget: str | None = None
    db: str = "ember"

    def cells(self) -> list[Cell]:
        """Every run of the night, in a stable order (workload, nemesis, nodes, seed)."""
        return [
            Cell(w, n, k, s, db=self.db, backend=self.backend)
            for w, n, k, s in itertools.product(
                self.workloads, self.nemeses, self.nodes, self.seeds
            )
        ]


@dataclass(frozen=True)
class Cell:
    """One run of the matrix."""

    workload: str
    nemesis: str
    nodes: int
    seed: int
    # Part of the cell's key: one workload x nemesis on sim and on Docker, or
    # on ember and on etcd, are different cells.
    db: str = "ember"
    backend: str = "sim"

    @property
    def key(self) -> str:
        """db/backend/workload/nemesis: what a night's cells are grouped by."""
        return f"{self.db}/{self.backend}/{self.workload}/{self.nemesis}"

    @property
    def name(self) -> str:
        return f"{self.key}/n{self.nodes}/seed{self.seed}"


@dataclass
class Outcome:
    """What one cell's run came to."""

    cell: Cell
    status: str
    elapsed_s: float = 0.0
    exit_code: int | None = None
    run_dir: Path | None = None
    reasons: list[str] = field(default_factory=list)
    anomalies: dict[str, int] = field(default_factory=dict)
    output_tail: str = ""


# --- the matrix file ------------------------------------------------------

_EXPLORED = re.compile(r"explore: \d+ runs in[^\n]*cells")

_KEYS: dict[str, str] = {
    "backend": f"one of {', '.join(BACKENDS)}",
    "db": "the database under test (faultline run --db)",
    "workloads": "a list of workload names",
    "nemeses": "a list of nemesis names",
    "seeds": "a seed count or a list of seeds",
    "seed_base": "the first seed when `seeds` is a count",
    "nodes": "a list of cluster sizes",
    "time_limit_s": "seconds each run drives its workload",
    "budget_s": "seconds the whole night may take",
    "grace_s": "seconds a run may overrun its time limit before it is killed",
    "store": "the run store directory",
    "junit": "the JUnit XML file to write",
    "command": "the run command, a list of strings",
    "extra_args": "more arguments for every run, a list of strings",
    "explore_budget": "an explore budget per cell (90s, 10m, 20 runs): each cell explores "
    "seeds from its seed instead of running once (backend sim)",
}


def load_matrix(path: Path) -> Matrix:
    """Reads and validates a matrix file; raises MatrixError naming the problem."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MatrixError(f"cannot read matrix {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None
    try:
        return parse_matrix(raw)
    except MatrixError as exc:
        raise MatrixError(f"{path}: {exc}") from None


def parse_matrix(raw: dict[str, Any], base: Path = Path(".")) -> Matrix:
    """Validates a decoded matrix; relative paths resolve against `base` (the working dir)."""
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise MatrixError(f"unknown key {unknown[0]!r}; known keys: {', '.join(_KEYS)}")
    for key in ("workloads", "nemeses"):
        if key not in raw:
            raise MatrixError(f"missing key {key!r} ({_KEYS[key]})")
    backend = _get(raw, "backend", str, "sim")
    if backend not in BACKENDS:
        raise MatrixError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    seeds_raw = raw.get("seeds", 1)
    if isinstance(seeds_raw, int) and not isinstance(seeds_raw, bool):
        if seeds_raw < 1:
            raise MatrixError(f"seeds must be at least 1, got {seeds_raw}")
        first = _get(raw, "seed_base", int, 1)
        seeds = tuple(range(first, first + seeds_raw))
    else:
        seeds = _list(raw, "seeds", int)
    if any(s < 0 for s in seeds):
        raise MatrixError("seeds must be non-negative integers")
    nodes = _list(raw, "nodes", int) if "nodes" in raw else (3,)
    if any(k < 1 for k in nodes):
        raise MatrixError("nodes must be positive cluster sizes")
    defaults = (("time_limit_s", 30.0), ("budget_s", 3600.0), ("grace_s", DEFAULT_GRACE_S))
    numbers = {k: float(_get(raw, k, (int, float), d)) for k, d in defaults}
    for key, value in numbers.items():
        if value <= 0:
            raise MatrixError(f"{key} must be positive, got {value:g}")
    command = _list(raw, "command", str) if "command" in raw else ("faultline", "run")
    explore = raw.get("explore_budget")
    if explore is not None:
        if not isinstance(explore, str):
            raise MatrixError(f"explore_budget must be {_KEYS['explore_budget']}, got {explore!r}")
        from harness.cli import CliError
        from harness.commands_explore import parse_budget

        if backend != "sim":
            raise MatrixError('explore_budget needs backend "sim" (explore plays simulated seeds)')
        try:
            parse_budget(explore)
        except CliError as exc:
            raise MatrixError(f"explore_budget: {str(exc).removeprefix('--budget ')}") from None
    store = base / _get(raw, "store", str, "store")
    db = _get(raw, "db", str, "ember")
    _get(raw, "junit", str, "")
    return Matrix(
        backend=backend, workloads=_list(raw, "workloads", str),
        nemeses=_list(raw, "nemeses", str), seeds=seeds, nodes=nodes,
        time_limit_s=numbers["time_limit_s"], budget_s=numbers["budget_s"],
        grace_s=numbers["grace_s"], store=store,
        junit=base / raw["junit"] if "junit" in raw else store / "nightly-junit.xml",
        command=command,
        extra_args=_list(raw, "extra_args", str) if "extra_args" in raw else (),
        explore_budget=explore, db=db,
    )  # fmt: skip


def _get(raw: dict[str, Any], key: str, kind: Any, default: Any) -> Any:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MatrixError(f"{key} must be {_KEYS[key]}, got {value!r}")
    return value


def _list(raw: dict[str, Any], key: str, kind: type) -> tuple[Any, ...]:
    value = raw.get(key)
    ok = isinstance(value, list) and value
    if not ok or any(isinstance(v, bool) or not isinstance(v, kind) for v in value or ()):
        raise MatrixError(f"{key} must be {_KEYS[key]} (non-empty), got {value!r}")
    assert isinstance(value, list)
    return tuple(value)


# --- running one cell -------------------------------------------------------


def resolve_command(command: tuple[str, ...]) -> list[str]:
    """The run command; `faultline` falls back to this interpreter when not on PATH."""
    if command and command[0] == "faultline" and shutil.which("faultline") is None:
        return [sys.executable, "-m", "harness.cli", *command[1:]]
    return list(command)


def run_args(matrix: Matrix, cell: Cell) -> list[str]:
    """The arguments a cell passes to the run command."""
    if matrix.explore_budget is not None:
        return ["--budget", matrix.explore_budget, *_plan_args(matrix, cell)]
    return _plan_args(matrix, cell)


def cell_command(matrix: Matrix) -> tuple[str, ...]:
    """The matrix's command, its `run` turned into `explore` when cells explore."""
    if matrix.explore_budget is not None and matrix.command[-1:] == ("run",):
        return (*matrix.command[:-1], "explore")
    return matrix.command


def _plan_args(matrix: Matrix, cell: Cell) -> list[str]:
    return [
        "--backend", matrix.backend, "--db", matrix.db, "--workload", cell.workload,
        "--nemesis", cell.nemesis,
        "--seed", str(cell.seed), "--nodes", str(cell.nodes),
        "--time-limit", f"{matrix.time_limit_s:g}", "--store", str(matrix.store),
        *matrix.extra_args,
    ]  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> tuple[bytes, str]:
    """Ends a run that outlived its time: SIGTERM first, which `faultline run`
    unwinds like Ctrl-C (heals faults, removes its cluster), then SIGKILL to
    its whole session if it is still there after `TERM_GRACE_S`. Returns its
    output and how it ended."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=TERM_GRACE_S)
        how = "stopped (SIGTERM, after which it cleaned up)"
    except subprocess.TimeoutExpired:
        out, how = None, f"killed (SIGKILL, {TERM_GRACE_S:g}s after a SIGTERM it did not end on)"
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # what it started and left behind
    if out is None:  # retrying communicate loses none of the output read so far
        out, _ = proc.communicate()
    return out, how


def run_cell(matrix: Matrix, cell: Cell, timeout_s: float) -> Outcome:
    """Runs one cell as a subprocess and reads its outcome; never raises for the run's faults."""
    before = {r.path for r in iter_runs(matrix.store)}
    argv = resolve_command(cell_command(matrix)) + run_args(matrix, cell)
    started = time.monotonic()
    try:
        # A session of its own, so a timeout kills the run's children too.
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
    except OSError as exc:
        return Outcome(cell, ERROR, reasons=[f"cannot start {argv[0]}: {exc.strerror}"])
    stopped = ""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        out, stopped = _stop(proc)
    outcome = Outcome(cell, ERROR, elapsed_s=time.monotonic() - started, exit_code=proc.returncode)
    outcome.output_tail = out.decode("utf-8", "replace")[-_TAIL_CHARS:]
    new = sorted(r.path for r in iter_runs(matrix.store) if r.path not in before)
    outcome.run_dir = new[-1] if new else None
    if stopped:
        outcome.reasons.append(f"{stopped} after {timeout_s:.0f}s without finishing")
        return outcome
    _read_verdict(outcome)
    return outcome


def _read_verdict(outcome: Outcome) -> None:
    """Sets status, reasons and anomaly counts from the run dir and exit code."""
    code = outcome.exit_code
    explored = _EXPLORED.search(outcome.output_tail)
    if explored is not None:
        # Explore keeps only the runs that are not valid: its summary is the verdict.
        outcome.reasons.append(explored.group(0))
        if outcome.run_dir is None and code == 0:
            outcome.status = PASSED
            return
    if outcome.run_dir is None:
        outcome.reasons.append(f"exited {code} without leaving a run dir")
        return
    try:
        results = msgspec.json.decode(RunDir(outcome.run_dir).results.read_bytes())
    except (OSError, msgspec.DecodeError) as exc:
        outcome.reasons.append(f"exited {code}; results.json unreadable: {exc}")
        return
    if not isinstance(results, dict):
        outcome.reasons.append(f"exited {code}; results.json is not a JSON object")
        return
    valid = results.get("valid")
    statuses: dict[Any, str] = {True: PASSED, False: FAILED, UNKNOWN: UNKNOWN}
    outcome.status = statuses.get(valid, ERROR) if isinstance(valid, bool | str) else ERROR
    checkers = results.get("checkers")
    for name, res in sorted(checkers.items()) if isinstance(checkers, dict) else ():
        if not isinstance(res, dict):
            continue
        for anomaly in res.get("anomalies") or []:
            kind = f"{name}:{anomaly.get('kind', '?') if isinstance(anomaly, dict) else '?'}"
            outcome.anomalies[kind] = outcome.anomalies.get(kind, 0) + 1
        if res.get("valid") is False:
            outcome.reasons.append(f"{name}: invalid")
    reasons = results.get("reasons")
    if isinstance(reasons, list):
        outcome.reasons.extend(str(r) for r in reasons if r)
    expected = {PASSED: 0, FAILED: 1, UNKNOWN: 2}.get(outcome.status)
    if expected is not None and code != expected:
        # The verdict stands (it is what the checkers proved), but say the run misbehaved.
        outcome.reasons.append(f"exit code {code} disagrees with the verdict ({outcome.status})")
        if code not in (0, 1, 2):
            outcome.status = ERROR


# --- the night --------------------------------------------------------------


def run_night(
    matrix: Matrix, progress: Any = None, clock: Callable[[], float] = time.monotonic
) -> list[Outcome]:
    """Runs every cell within the budget; `progress(i, n, outcome)` after each."""
    cells = matrix.cells()
    deadline = clock() + matrix.budget_s
    outcomes: list[Outcome] = []
    for i, cell in enumerate(cells):
        left = deadline - clock()
        if left <= 0:
            outcome = Outcome(cell, SKIPPED, reasons=["night's time budget used up"])
        else:
            outcome = run_cell(matrix, cell, min(left, matrix.time_limit_s + matrix.grace_s))
        outcomes.append(outcome)
        if progress is not None:
            progress(i + 1, len(cells), outcome)
    return outcomes


def replay_command(outcome: Outcome, matrix: Matrix) -> str:
    """The command that reproduces a run: replay of its dir, else the run line."""
    if outcome.run_dir is not None:
        return f"faultline replay {outcome.run_dir}"
    return " ".join([*matrix.command, *run_args(matrix, outcome.cell)])


def exit_code(outcomes: list[Outcome]) -> int:
    """1 if any run failed, else 2 if any was unknown or errored, else 0."""
    statuses = {o.status for o in outcomes}
    if FAILED in statuses:
        return 1
    return 2 if statuses & {UNKNOWN, ERROR} else 0


# --- reporting --------------------------------------------------------------


def junit_xml(outcomes: list[Outcome], matrix: Matrix, timestamp: str) -> bytes:
    """One JUnit test case per run; failures carry verdict, anomalies and replay."""
    counts = Counter(o.status for o in outcomes)
    total_s = f"{sum(o.elapsed_s for o in outcomes):.3f}"
    attrs = {
        "tests": str(len(outcomes)), "failures": str(counts[FAILED]),
        "errors": str(counts[ERROR] + counts[UNKNOWN]), "skipped": str(counts[SKIPPED]),
        "time": total_s,
    }  # fmt: skip
    suites = ET.Element("testsuites", {"name": "faultline nightly", **attrs})
    suite_attrs = {"name": f"faultline.nightly.{matrix.backend}", "timestamp": timestamp, **attrs}
    suite = ET.SubElement(suites, "testsuite", suite_attrs)
    for o in outcomes:
        case = ET.SubElement(
            suite, "testcase", classname="nightly." + o.cell.key.replace("/", "."),
            name=f"n{o.cell.nodes}-seed{o.cell.seed}", time=f"{o.elapsed_s:.3f}",
        )  # fmt: skip
        detail = _detail(o, matrix)
        if o.status == FAILED:
            ET.SubElement(case, "failure", type="invalid", message=_summary(o)).text = detail
        elif o.status in (UNKNOWN, ERROR):
            ET.SubElement(case, "error", type=o.status, message=_summary(o)).text = detail
        elif o.status == SKIPPED:
            ET.SubElement(case, "skipped", message=_summary(o))
        ET.SubElement(case, "system-out").text = detail
    ET.indent(suites)
    body: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return body + b"\n"


def _summary(o: Outcome) -> str:
    kinds = ", ".join(f"{k} x{n}" for k, n in sorted(o.anomalies.items()))
    head = {FAILED: "invalid", UNKNOWN: "unknown"}.get(o.status, o.status)
    return f"{head}: {kinds or '; '.join(o.reasons) or 'no details'}"


def _detail(o: Outcome, matrix: Matrix) -> str:
    lines = [f"verdict: {o.status}", f"exit code: {o.exit_code}",
             f"run dir: {o.run_dir or '(none)'}"]  # fmt: skip
    lines += [f"anomaly {k}: {n}" for k, n in sorted(o.anomalies.items())]
    lines += [f"reason: {r}" for r in o.reasons]
    lines.append(f"replay: {replay_command(o, matrix)}")
    if o.status == ERROR and o.output_tail:
        lines += ["output (tail):", o.output_tail]
    return "\n".join(lines)


def summary_table(outcomes: list[Outcome]) -> Any:
    """The night as a rich table: one row per run, then totals."""
    from rich.table import Table

    style = {PASSED: "green", FAILED: "bold red", UNKNOWN: "yellow", ERROR: "red",
             SKIPPED: "dim"}  # fmt: skip
    table = Table(title="faultline nightly")
    columns = ("db", "backend", "workload", "nemesis", "nodes", "seed", "verdict", "time (s)",
               "anomalies")  # fmt: skip
    for column in columns:
        table.add_column(
            column, justify="right" if column in ("nodes", "seed", "time (s)") else "left"
        )
    for o in outcomes:
        note = ", ".join(f"{k} x{n}" for k, n in sorted(o.anomalies.items()))
        if not note and o.status in (ERROR, UNKNOWN):
            note = "; ".join(o.reasons)[:80]
        table.add_row(o.cell.db, o.cell.backend, o.cell.workload, o.cell.nemesis,
                      str(o.cell.nodes), str(o.cell.seed),
                      f"[{style[o.status]}]{o.status}[/]", f"{o.elapsed_s:.1f}", note)  # fmt: skip
    counts = Counter(o.status for o in outcomes)
    table.caption = "  ".join(
        f"{s}: {counts[s]}" for s in (PASSED, FAILED, UNKNOWN, ERROR, SKIPPED)
    )
    return table


def night_coverage(matrix: Matrix, outcomes: list[Outcome], before: Any) -> Any:
    """The night's fault coverage (harness.coverage): the applied faults of its
    runs' histories, plus, when cells explore, what the night's explores added
    to the store's table (`before` is that table as the night started; explore
    keeps only failing runs' dirs, so their histories alone would undercount)."""
    from harness.commands_explore import COVERAGE_FILE
    from harness.coverage import Coverage, cells_of_history

    night = Coverage()
    if matrix.explore_budget is not None:
        after = Coverage.load(matrix.store / COVERAGE_FILE)
        night.add(c for c, n in after.hits.items() for _ in range(n - before.hits.get(c, 0)))
        return night
    for o in outcomes:
        history = RunDir(o.run_dir).history if o.run_dir is not None else None
        if history is not None and history.is_file():
            night.add(cells_of_history(history))
    return night


def night_reachable(matrix: Matrix, plans: list[Any]) -> list[Any]:
    """The coverage cells some plan of the night can hit (`harness.explore.Space`),
    as explore's swarm draws them when the cells explore."""
    from harness.explore import Space

    swarmed = matrix.explore_budget is not None
    return list(dict.fromkeys(c for p in plans for c in Space.of(p, swarmed).cells()))


def coverage_table(coverage: Any, reachable: Any = None) -> Any:
    """The coverage as a rich table: a row per fault kind, a column per phase,
    each entry cells hit / cells there are (one per role); the caption counts
    the `reachable` cells (those the night's plans can draw) when given."""
    from rich.table import Table

    rows = coverage.table()
    phases = list(dict.fromkeys(phase for _, phase, _, _ in rows))
    table = Table(title="fault coverage (kind x phase: roles hit / roles)")
    table.add_column("kind")
    for phase in phases:
        table.add_column(phase, justify="right")
    for kind in dict.fromkeys(kind for kind, _, _, _ in rows):
        got = {phase: (hit, total) for k, phase, hit, total in rows if k == kind}
        table.add_row(kind, *(_fraction(*got[p]) if p in got else "" for p in phases))
    table.caption = f"{coverage.hit} of {coverage.total} cells hit"
    if reachable is not None:
        hit = coverage.hit_among(reachable)
        table.caption = (f"{hit} of the {len(reachable)} cells the night's plans can reach hit "
                         f"({coverage.hit} of {coverage.total} in all)")  # fmt: skip
    return table


def _fraction(hit: int, total: int) -> str:
    return f"[{'green' if hit == total else 'yellow' if hit else 'dim'}]{hit}/{total}[/]"


# --- command line -------------------------------------------------------------


def add_parser(subparsers: Any) -> None:
    """Registers `faultline nightly`."""
    p = subparsers.add_parser(
        "nightly", help="run a matrix of tests and write JUnit XML",
        description="Run workloads x nemeses x seeds x cluster sizes one after another "
        "within a time budget; write JUnit XML and print a summary.",
    )  # fmt: skip
    p.add_argument("--matrix", required=True, type=Path, metavar="FILE.toml")
    p.add_argument("--junit", type=Path, help="JUnit XML path (overrides the matrix)")
    p.add_argument("--store", type=Path, help="run store (overrides the matrix)")
    p.add_argument("--budget", type=float, metavar="SECONDS", help="overrides budget_s")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rich.console import Console
    from rich.progress import Progress

    from harness.cli import CliError
    from harness.nightly_plans import cell_plans

    try:
        matrix = load_matrix(args.matrix)
        plans = cell_plans(matrix)  # every key honoured by the backend and db, or refused now
    except MatrixError as exc:
        raise CliError(str(exc)) from None
    if args.budget is not None and args.budget <= 0:
        raise CliError(f"--budget must be positive, got {args.budget:g}")
    matrix = replace(
        matrix, junit=args.junit or matrix.junit, store=args.store or matrix.store,
        budget_s=args.budget or matrix.budget_s,
    )  # fmt: skip
    from harness.commands_explore import COVERAGE_FILE
    from harness.coverage import Coverage

    try:
        before = Coverage.load(matrix.store / COVERAGE_FILE)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    console = Console(stderr=True)
    timestamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("nightly", total=len(matrix.cells()))

        def step(i: int, n: int, o: Outcome) -> None:
            bar.update(task, completed=i, description=f"{o.cell.name}: {o.status}")

        outcomes = run_night(matrix, step)
    matrix.junit.parent.mkdir(parents=True, exist_ok=True)
    matrix.junit.write_bytes(junit_xml(outcomes, matrix, timestamp))
    Console().print(summary_table(outcomes))
    reachable = night_reachable(matrix, list(plans.values())) if plans else None
    Console().print(coverage_table(night_coverage(matrix, outcomes, before), reachable))
    print(f"JUnit XML: {matrix.junit}")
    return exit_code(outcomes)
