"""`faultline check RUN_DIR|HISTORY`: check a stored run standalone.

Reads the run (plan, history, audit events where present), runs the
selected checkers, writes results.json beside the history, prints one line
per checker, and exits 0 valid, 1 invalid, 2 unknown (or bad input).
HISTORY may be faultline's history.jsonl, a Jepsen history.edn or one of
porcupine's test histories (`--format`, importers/formats.py).

The checkers are imported when the command runs, not when the parser is
built: `faultline check` on a small history should cost well under a
second, most of it Python's own start-up.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from checkers.linear import model_names

if TYPE_CHECKING:
    from checkers.compose import Result

EXIT_CODES = {True: 0, False: 1, "unknown": 2}
# compose.REGISTRY's names, kept here so building the parser imports no
# checker (a test holds the two equal).
CHECKER_NAMES = ("linearizable", "raft", "revisions", "convergence", "stats", "sim", "logs")
FORMATS = ("auto", "faultline", "jepsen", "porcupine")


def add_parser(subparsers: Any) -> None:
    """Registers the `check` subcommand."""
    p = subparsers.add_parser(
        "check",
        help="check a run dir or a history.jsonl; exit 0 valid, 1 invalid, 2 unknown",
        description=__doc__,
    )
    p.add_argument("path", metavar="RUN_DIR|HISTORY")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="history format (default auto: by the file's first characters)",
    )
    p.add_argument(
        "--model", choices=model_names(), help="linearizability model (default: plan's, or kv)"
    )
    p.add_argument(
        "--time-limit",
        type=_positive,
        metavar="SECONDS",
        help="linearizability search budget (default 60); past it the verdict is unknown",
    )
    p.add_argument(
        "--checker",
        action="append",
        choices=sorted(CHECKER_NAMES),
        dest="checkers",
        help="run only this checker (repeatable; default: all that apply)",
    )
    p.add_argument(
        "--revisions",
        metavar="JSON",
        help='where the history\'s ops carry revisions, e.g. \'{"ops": {"put": "value"}}\' '
        "(checkers/revision_fields.py; default: the run's test.json, else none: "
        "no revision checks)",
    )
    p.add_argument("--no-write", action="store_true", help="do not write results.json")
    p.add_argument(
        "--spark",
        action="store_true",
        help="decide linearizability per key on Spark executors (a history too large for "
        "one process; --time-limit is then per key; pipeline/spark_check.py)",
    )
    p.add_argument(
        "--master",
        help="with --spark: the Spark master (default local[*]; spark://host:7077 for a cluster)",
    )
    p.set_defaults(func=run)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _declaration(text: str) -> dict[str, Any]:
    """--revisions JSON, checked (ValueError, one line, on anything malformed)."""
    import json

    from checkers.revision_fields import parse

    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--revisions is not JSON: {exc}") from None
    parse(doc, source="--revisions")
    return dict(doc)


def summary(result: Result) -> list[str]:
    """One line per checker and one for the whole verdict."""
    lines = []
    for name, r in result.checkers.items():
        total = sum(r.figures.get("anomaly_counts", {}).values()) or len(r.anomalies)
        detail = r.error or (f"{total} anomalies" if total else "")
        lines.append(f"  {name:<14} {_word(r.valid):<8} {detail}".rstrip())
        if r.anomalies:  # the first one says what kind of thing went wrong
            first = r.anomalies[0]
            lines.append(f"    {first.kind}: {first.message}")
    lines.extend(f"  note: {note}" for note in result.notes)
    lines.append(f"{_word(result.valid)}: {result.ops} ops checked in {result.elapsed_s:.2f}s")
    return lines


def _word(valid: object) -> str:
    if valid is True:
        return "valid"
    return "INVALID" if valid is False else "unknown"


def _load(path: Path, fmt: str, notes: list[str]) -> tuple[Any, ...]:
    """(plan, events, audit, run dir, history file, format) of `path`."""
    from checkers.compose import load_run
    from checkers.importers.formats import detect, history_file, load_events

    file = history_file(path)
    if fmt == "auto":
        fmt = detect(file)
    if fmt == "faultline":
        plan, history, audit, run_dir = load_run(path, notes)
        return plan, history, audit, run_dir, file, fmt
    fmt, history = load_events(file, fmt, notes)
    return {}, history, None, file.parent, file, fmt


def run(args: argparse.Namespace) -> int:
    """Checks the run and returns the exit code for its verdict."""
    from checkers.audit import load_timeline
    from checkers.compose import check, write_results
    from checkers.node_logs import load_logs
    from checkers.sim import load_sim_report

    if args.spark or args.master:
        return _run_spark(args)
    notes: list[str] = []
    plan, history, audit, run_dir, file, fmt = _load(Path(args.path), args.format, notes)
    options: dict[str, Any] = {}
    if fmt == "faultline":
        # The anchor of the audit events on the history's clock: without it
        # the time rules (check quorum, stability after heal) cannot run.
        options["history_zero_wall"] = load_timeline(run_dir)
    if args.model:
        options["model"] = args.model
    if args.time_limit:
        options["lin_time_limit_s"] = args.time_limit
    if args.checkers:
        options["checkers"] = args.checkers
    if args.revisions is not None:
        options["revisions"] = _declaration(args.revisions)
    logs = load_logs(run_dir) if fmt == "faultline" else None
    result = check(plan, history, options, audit=audit, sim=load_sim_report(run_dir), logs=logs)
    result.notes = notes
    result.history = file.name
    result.history_format = fmt
    if not args.no_write:
        write_results(result, run_dir)
    print("\n".join(summary(result)))
    return EXIT_CODES[result.valid]


def _run_spark(args: argparse.Namespace) -> int:
    """`--spark`: the linearizability checker on Spark executors; results.json
    as the local check writes it (what differs is in its notes)."""
    import msgspec

    from checkers.compose import write_results
    from checkers.importers.formats import detect, history_file

    if not args.spark:
        raise ValueError("--master needs --spark")
    path = Path(args.path)
    file = history_file(path)
    if args.format not in ("auto", "faultline") or detect(file) != "faultline":
        raise ValueError("--spark reads faultline's history.jsonl only (DESIGN.md's format)")
    if args.checkers and args.checkers != ["linearizable"]:
        raise ValueError("--spark runs the linearizable checker only")
    if args.revisions is not None:
        raise ValueError("--spark runs no revision rules (`faultline pipeline precheck` does)")
    plan: dict[str, Any] = {}
    if path.is_dir() and (path / "test.json").is_file():
        plan = msgspec.json.decode((path / "test.json").read_bytes(), type=dict[str, Any])
    workload = plan.get("workload")
    model = args.model or (workload.get("model") if isinstance(workload, dict) else None)
    from pipeline.session import SparkStartError, start_session

    master = args.master or "local[*]"
    try:
        from pipeline.spark_check import spark_check

        spark = start_session(master, app="faultline-check")
    except ImportError as exc:
        raise ValueError(
            f"--spark needs pyspark ({exc}); pip install 'faultline[pipeline]'"
        ) from None
    except SparkStartError as exc:
        raise ValueError(str(exc)) from None
    notes: list[str] = []
    result = spark_check(spark, file, model=model, master=master, notes=notes,
                         time_limit_s=args.time_limit or 60.0)  # fmt: skip
    seed = plan.get("seed")
    result.test = str(plan["name"]) if "name" in plan else None
    result.seed = seed if isinstance(seed, int | str) else None
    result.history, result.history_format = file.name, "faultline"
    if not args.no_write:
        write_results(result, file.parent)
    print("\n".join(summary(result)))
    return EXIT_CODES[result.valid]
